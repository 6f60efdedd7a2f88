import type { Logger } from "../runtime/logger.js";

export interface Periodic {
  /** Runs a round now, or (one is running) once more right after it; resolves once no round is left. */
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
  let again = false;
  let stopped = false;
  const run = (now: boolean): Promise<void> => {
    // A tick while a round runs is skipped; a runNow is not: a round starts after it.
    again ||= now && running !== undefined;
    running ??= (async () => {
      do {
        again = false;
        try {
          await task();
        } catch (err) {
          logger.warn({ err, task: name }, "periodic task failed; retrying on the next round");
        }
      } while (again && !stopped);
      running = undefined;
    })();
    return running;
  };
  const timer = setInterval(() => void run(false), intervalMs);
  timer.unref();
  if (opts.runAtStart ?? true) void run(false);
  return {
    runNow: () => run(true),
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
