import { every } from "./background/periodic.js";
import type { Logger } from "./logger.js";

/**
 * Calls onOrphaned once when this process's parent goes away (its parent id changes). npm runs
 * scripts through `sh -c`, and a SIGTERM sent to npm ends that shell without passing the signal
 * on; a supervised process also must not outlive a supervisor that was killed outright.
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
