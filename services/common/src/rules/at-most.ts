/** Waits for `promise`, `ms` at most, leaving no timer behind; true when it settled (either way) in time. */
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
