/**
 * Calls onOrphaned once when this process's parent goes away (its parent id changes). npm runs
 * scripts through `sh -c`, and a SIGTERM sent to npm ends that shell without passing the signal
 * on; a supervised process also must not outlive a supervisor that was killed outright.
 */
export function watchParent(onOrphaned: () => void, intervalMs = 1_000): () => void {
  const original = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid !== original) {
      clearInterval(timer);
      onOrphaned();
    }
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
