/**
 * Waits for `promise`, but `ms` at most, and leaves no timer behind. True when it settled in time
 * (whether it resolved or rejected: a caller that needs the outcome awaits the promise itself).
 */
export async function atMost(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = promise.then(
    () => true,
    () => true,
  );
  try {
    return await Promise.race([settled, new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
