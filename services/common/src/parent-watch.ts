import { every } from "./background/periodic.js";
import type { Logger } from "./logger.js";

/**
 * Calls onOrphaned once when this process's parent goes away: a SIGTERM to npm ends its `sh -c`
 * without passing the signal on, and a supervisor may be killed outright.
 */
export function watchParent(onOrphaned: () => void, logger: Logger, intervalMs = 1_000): () => void {
  const original = process.ppid;
  const watch = every(
    "watching the parent process",
    intervalMs,
    async () => {
      if (process.ppid === original) return;
      void watch.stop();
      onOrphaned();
    },
    logger,
    { runAtStart: false },
  );
  return () => void watch.stop();
}
