import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "@jest/globals";
import { LOCAL_IDENTITY_FILE, withLocalStackIdentity } from "../src/state-files.js";
import { parseOwnIdentity } from "@pi/common/rpc/service-identity";
import { WORKLOADS } from "@pi/common/rpc/allowed-callers";
import { localIdentities } from "../src/stack.js";

// npm start's service identities: one key pair per workload, generated once under STATE_DIR and kept.

const dirs: string[] = [];
const stateDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "pi-identities-"));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("the local stack's service identities", () => {
  it("generates a key per workload once, readable by the owner alone, and keeps it for the next start", () => {
    const dir = stateDir();
    const first = localIdentities(dir);
    expect(Object.keys(first)).toEqual([...WORKLOADS]);
    for (const name of WORKLOADS) expect(parseOwnIdentity(first[name]).name).toBe(name);
    expect(new Set(WORKLOADS.map((n) => parseOwnIdentity(first[n]).kid)).size).toBe(WORKLOADS.length);
    expect(statSync(join(dir, LOCAL_IDENTITY_FILE)).mode & 0o777).toBe(0o600);
    expect(localIdentities(dir)).toEqual(first);
  });

  it("adds a workload missing from an older file without changing the others", () => {
    const dir = stateDir();
    const first = localIdentities(dir);
    const { ops: _, ...older } = first;
    writeFileSync(join(dir, LOCAL_IDENTITY_FILE), JSON.stringify(older), { mode: 0o600 });
    const again = localIdentities(dir);
    expect(again.gateway).toBe(first.gateway);
    expect(parseOwnIdentity(again.ops).name).toBe("ops");
    expect(JSON.parse(readFileSync(join(dir, LOCAL_IDENTITY_FILE), "utf8")).ops).toBe(again.ops);
  });

  it("the operator CLI takes the ops key from there, unless SERVICE_IDENTITY_KEY is set", () => {
    const dir = stateDir();
    const keys = localIdentities(dir);
    expect(withLocalStackIdentity({}, dir, "ops").SERVICE_IDENTITY_KEY).toBe(keys.ops);
    expect(withLocalStackIdentity({ SERVICE_IDENTITY_KEY: keys.gateway }, dir, "ops").SERVICE_IDENTITY_KEY).toBe(
      keys.gateway,
    );
    expect(withLocalStackIdentity({}, stateDir(), "ops").SERVICE_IDENTITY_KEY).toBeUndefined();
  });
});
