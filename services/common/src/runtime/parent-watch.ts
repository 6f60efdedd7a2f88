import { every } from "../background/periodic.js";
import type { Logger } from "./logger.js";

/** Calls onOrphaned once the parent is gone: npm's `sh -c` does not pass a SIGTERM on. */
export function watchParent(onOrphaned: () => void, logger: Logger): void {
  const original = process.ppid;
  const watch = every(
    "watching the parent process",
    1_000,
    async () => {
      if (process.ppid === original) return;
      void watch.stop();
      onOrphaned();
    },
    logger,
    { runAtStart: false },
  );
}
