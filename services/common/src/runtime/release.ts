// Which release this code is (releases.json's `current`, the chart's appVersion: a unit test checks)
// and how releases compare (docs/upgrades.md, "Releases").

export const RELEASE = "1.1.0";

const SEMVER = /^(\d+)\.(\d+)\.(\d+)$/;

export const isRelease = (v: unknown): v is string => typeof v === "string" && SEMVER.test(v);

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
