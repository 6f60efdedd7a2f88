import type { Logger } from "@pi/common";

export interface Periodic {
  /** Runs the task now (unless it is running) and waits for it. */
  runNow(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Runs `task` every `intervalMs`, never two at once, and once right away. A failure is logged and
 * the next round tries again; stop() waits for the round in progress.
 */
export function every(name: string, intervalMs: number, task: () => Promise<unknown>, logger: Logger): Periodic {
  let running: Promise<void> | undefined;
  let stopped = false;
  const run = (): Promise<void> => {
    if (running) return running;
    running = (async () => {
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
  void run();
  return {
    runNow: run,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
