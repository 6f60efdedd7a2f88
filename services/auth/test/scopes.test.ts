import { describe, expect, it } from "@jest/globals";
import { grantScopes, isScope, RING1_SCOPES } from "../src/scopes.js";

// Authentication, item 3: omitting scope grants all Ring 1 scopes (the partner is allowed); a
// requested scope outside the partner's allowed set gives invalid_scope.

const both = ["connections:write", "files:write"];

describe("scope grants", () => {
  it("Ring 1 is connections:write and files:write", () => {
    expect([...RING1_SCOPES]).toEqual(both);
    expect(isScope("files:write")).toBe(true);
    expect(isScope("files:read")).toBe(false);
  });

  it("omitted (or empty) scope grants every allowed Ring 1 scope, in a stable order", () => {
    expect(grantScopes(undefined, both)).toEqual({ ok: true, scopes: both });
    expect(grantScopes("", both)).toEqual({ ok: true, scopes: both });
    expect(grantScopes(undefined, ["files:write", "connections:write"])).toEqual({ ok: true, scopes: both });
    expect(grantScopes(undefined, ["files:write"])).toEqual({ ok: true, scopes: ["files:write"] });
  });

  it("a subset is granted exactly, without repeats, in the stable order", () => {
    expect(grantScopes("files:write", both)).toEqual({ ok: true, scopes: ["files:write"] });
    expect(grantScopes("files:write connections:write", both)).toEqual({ ok: true, scopes: both });
    expect(grantScopes("files:write  files:write ", both)).toEqual({ ok: true, scopes: ["files:write"] });
  });

  it.each([
    "admin",
    "files:write admin",
    "FILES:WRITE",
    "files:write,connections:write",
    "files:write\tconnections:write",
  ])("invalid_scope for %j", (requested) => {
    expect(grantScopes(requested, both)).toEqual({ ok: false });
  });

  it("invalid_scope for a Ring 1 scope the partner is not allowed", () => {
    expect(grantScopes("connections:write", ["files:write"])).toEqual({ ok: false });
  });

  it("an allowed scope that is not Ring 1 is never granted", () => {
    expect(grantScopes(undefined, ["files:write", "legacy:admin"])).toEqual({ ok: true, scopes: ["files:write"] });
    expect(grantScopes("legacy:admin", ["files:write", "legacy:admin"])).toEqual({ ok: false });
  });
});
