// Which release this code is (releases.json's `current`, the chart's appVersion: a unit test checks)
// and how releases compare (docs/upgrades.md, "Releases").

export const RELEASE = "1.1.0";

export const isRelease = (v: unknown): v is string => typeof v === "string" && /^\d+\.\d+\.\d+$/.test(v);

/** Negative, zero or positive as release `a` is older than, the same as or newer than `b`. */
export function compareReleases(a: string, b: string): number {
  if (!isRelease(a) || !isRelease(b)) throw new RangeError(`not a release version: ${isRelease(a) ? b : a}`);
  return a.localeCompare(b, "en", { numeric: true });
}
