import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "@jest/globals";

// A unit test file loads its modules in a registry of its own, so the @pi/common barrel would load
// the MongoDB, Kafka and gRPC drivers into every test of a pure rule that reaches it (docs/testing.md).
// The services' modules and the unit tests import the module they need by path instead.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const BARREL = /from "@pi\/common"|import\("@pi\/common"\)/;

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === "node_modules" || entry.name === "dist") return [];
    const path = join(dir, entry.name);
    return entry.isDirectory() ? tsFiles(path) : entry.name.endsWith(".ts") ? [path] : [];
  });
}

describe("the @pi/common barrel", () => {
  it("is imported by no module of a service or of deploy/local, and by no unit test", () => {
    const packages = [...readdirSync(join(root, "services")).map((name) => `services/${name}`), "deploy/local"];
    const checked = packages.flatMap((pkg) => [
      ...tsFiles(join(root, pkg, "src")),
      ...tsFiles(join(root, pkg, "test")).filter((file) => !file.endsWith(".integration.test.ts")),
    ]);
    expect(checked.length).toBeGreaterThan(100);
    const importers = checked
      .filter((file) => BARREL.test(readFileSync(file, "utf8")))
      .map((file) => relative(root, file));
    expect(importers).toEqual([]);
  });
});
