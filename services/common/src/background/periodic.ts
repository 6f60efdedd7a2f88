import type { Logger } from "../runtime/logger.js";

export interface Periodic {
  runNow(): Promise<void>;
  stop(): Promise<void>;
}

/** Runs `task` every `intervalMs` (and at once, by default), never two rounds at once; a failure is logged. */
export function every(
  name: string,
  intervalMs: number,
  task: () => Promise<unknown>,
  logger: Logger,
  opts: { runAtStart?: boolean } = {},
): Periodic {
  let running: Promise<void> | undefined;
  const run = (): Promise<void> => {
    if (running !== undefined) return running;
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
  const timer = setInterval(() => void run(), intervalMs);
  timer.unref();
  if (opts.runAtStart ?? true) void run();
  return {
    runNow: run,
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
