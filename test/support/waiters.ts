// Conditions a test waits for until what may make them hold happens (a record read, a webhook
// arriving): each is checked at once and at every `wake()`, and fails with its own message once
// its timeout passes. No polling, so no interval to tune.

export class Waiters {
  private readonly waiting = new Set<() => void>();

  /** Something happened that may make a condition hold. */
  wake(): void {
    for (const check of this.waiting) check();
  }

  /** Resolves once `holds()` is true; rejects with `timedOut()` after `timeoutMs`. */
  until(holds: () => boolean, timeoutMs: number, timedOut: () => Error): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!holds()) return;
        cleanup();
        resolve();
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(timedOut());
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.waiting.delete(check);
      };
      this.waiting.add(check);
      check();
    });
  }
}
