import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "@jest/globals";
import { compareReleases, RELEASE } from "../../services/common/src/runtime/release.js";
import { STORE_SCHEMAS, PREVIOUS_RELEASE } from "../../services/common/src/store/migrations/index.js";

// Releases (docs/upgrades.md, "Releases"): releases.json, the code's RELEASE, the chart and the
// CHANGELOG say the same thing, from the files alone (git tags need not travel with a clone).

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const read = (path: string) => readFileSync(join(root, path), "utf8");

interface Release {
  version: string;
  tag: string;
  commit: string;
  date: string;
  chart: string;
}
const releases = JSON.parse(read("releases.json")) as {
  current: string;
  releases: Release[];
  upgradeFrom: { name: string; commit: string }[];
};
const chart = read("charts/partner-integration/Chart.yaml");
const changelog = read("CHANGELOG.md");
const chartField = (name: string) => new RegExp(`^${name}: "?([^"\\n]+)"?$`, "m").exec(chart)?.[1];

/** The CHANGELOG's release sections: heading and body. */
function sections(): { heading: string; body: string }[] {
  return changelog
    .split(/^## /m)
    .slice(1)
    .map((s) => ({ heading: s.split("\n")[0]!, body: s }));
}

describe("releases", () => {
  it("the code's RELEASE, releases.json's current and the chart's version and appVersion are one version, newer than every release", () => {
    expect(releases.current).toBe(RELEASE);
    expect(chartField("version")).toBe(RELEASE);
    expect(chartField("appVersion")).toBe(RELEASE);
    for (const r of releases.releases) expect(compareReleases(RELEASE, r.version)).toBeGreaterThan(0);
  });

  it("every release is a tag vMAJOR.MINOR.PATCH with its full commit id, in order, the first v1.0.0 at f45f645", () => {
    expect(releases.releases[0]).toMatchObject({
      version: "1.0.0",
      tag: "v1.0.0",
      commit: expect.stringMatching(/^f45f645[0-9a-f]{33}$/),
    });
    for (const [i, r] of releases.releases.entries()) {
      expect(r.tag).toBe(`v${r.version}`);
      expect(r.commit).toMatch(/^[0-9a-f]{40}$/);
      expect(r.date).toMatch(/^\d{4}-\d{2}-\d{2}$/);
      if (i > 0) expect(compareReleases(r.version, releases.releases[i - 1]!.version)).toBeGreaterThan(0);
    }
    // The upgrade tests start from the previous release and from the oldest deployed commit.
    expect(releases.upgradeFrom.map((u) => u.commit)).toContain(releases.releases.at(-1)!.commit);
  });

  it("the stores' oldest reader is the previous release: this release only expands (docs/upgrades.md)", () => {
    expect(PREVIOUS_RELEASE).toBe(releases.releases.at(-1)!.version);
    for (const schema of Object.values(STORE_SCHEMAS))
      expect(compareReleases(schema.readableFrom, PREVIOUS_RELEASE)).toBeLessThanOrEqual(0);
  });

  it("CHANGELOG.md is Keep a Changelog: [Unreleased] first, then every release newest first with its date, under the six kinds of change", () => {
    const found = sections();
    expect(found[0]!.heading).toBe("[Unreleased]");
    const dated = found.slice(1).map((s) => s.heading);
    expect(dated).toEqual([...releases.releases].reverse().map((r) => `[${r.version}] - ${r.date}`));
    for (const { body } of found) {
      for (const [, kind] of body.matchAll(/^### (.+)$/gm))
        expect(["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]).toContain(kind);
      // The spec's versioning section: deprecations are announced in the changelog, so every section says.
      expect(body).toMatch(/^### Deprecated$/m);
    }
  });

  it("every route the chart deprecates (API_DEPRECATIONS) is announced under a Deprecated heading of the CHANGELOG", () => {
    const values = read("charts/partner-integration/values.yaml");
    const rules = JSON.parse(/^\s*API_DEPRECATIONS: (.+)$/m.exec(values)![1]!) as { route: string }[];
    const announced = sections()
      .map((s) => /^### Deprecated\n([\s\S]*?)(?=^### |$(?![\s\S]))/m.exec(s.body)?.[1] ?? "")
      .join("\n");
    for (const rule of rules) expect(announced).toContain(rule.route);
  });
});
