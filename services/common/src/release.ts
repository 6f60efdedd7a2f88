// Which release this code is, and how releases compare (docs/upgrades.md, "Releases"). The list of
// releases and their commits is releases.json at the repository's root; a unit test keeps RELEASE
// equal to its `current` and to the chart's appVersion.

/** The release this code is (or will be, until it is tagged): MAJOR.MINOR.PATCH. */
export const RELEASE = "1.1.0";

const SEMVER = /^(\d+)\.(\d+)\.(\d+)$/;

/** Whether `v` is a release version, MAJOR.MINOR.PATCH. */
export const isRelease = (v: unknown): v is string => typeof v === "string" && SEMVER.test(v);

/** Negative when `a` is older than `b`, 0 when equal, positive when newer. */
export function compareReleases(a: string, b: string): number {
  const pa = SEMVER.exec(a);
  const pb = SEMVER.exec(b);
  if (!pa || !pb) throw new RangeError(`not a release version: ${pa ? b : a}`);
  for (let i = 1; i <= 3; i++) {
    const d = Number(pa[i]) - Number(pb[i]);
    if (d !== 0) return d;
  }
  return 0;
}
