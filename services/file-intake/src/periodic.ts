import type { Logger } from "@pi/common";

export interface Periodic {
  /** Runs the task now (or joins the round in progress) and waits for it. */
  runNow(): Promise<void>;
  stop(): Promise<void>;
}

/** Runs `task` every `intervalMs`, never two rounds at once; a failed round is logged and retried next time. */
export function every(name: string, intervalMs: number, task: () => Promise<unknown>, logger: Logger): Periodic {
  let running: Promise<void> | undefined;
  let stopped = false;
  const run = (): Promise<void> => {
    running ??= (async () => {
      try {
        await task();
      } catch (err) {
        logger.warn({ err, task: name }, "periodic task failed; retrying on the next round");
      } finally {
        running = undefined;
      }
    })();
    return running;
  };
  const timer = setInterval(() => {
    if (!stopped) void run();
  }, intervalMs);
  timer.unref();
  return {
    runNow: run,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
