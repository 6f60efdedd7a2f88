import { describe, expect, it } from "@jest/globals";
import { create } from "@bufbuild/protobuf";
import { authv1 } from "@pi/proto";
import { propagationWarning } from "../src/commands.js";

// An operator change that a gateway or an auth replica had not applied when the call answered still
// stands; the CLI says which followers were late (on stderr), and nothing when every one confirmed.

const propagation = (p: Partial<Record<"gateways" | "confirmed" | "authReplicas" | "authConfirmed", number>>) =>
  create(authv1.PropagationSchema, {
    gateways: 2,
    confirmed: 2,
    authReplicas: 2,
    authConfirmed: 2,
    elapsedMs: 1200n,
    ...p,
  });

describe("the operator's propagation warning", () => {
  it("says nothing when every gateway and auth replica confirmed, or when none was live", () => {
    expect(propagationWarning(propagation({}))).toBeUndefined();
    expect(
      propagationWarning(propagation({ gateways: 0, confirmed: 0, authReplicas: 0, authConfirmed: 0 })),
    ).toBeUndefined();
    expect(propagationWarning(undefined)).toBeUndefined();
  });

  it("names late gateways as before", () => {
    expect(propagationWarning(propagation({ gateways: 3 }))).toBe(
      "warning: 1 of 3 gateways had not confirmed the change after 1200 ms; they apply it as soon as they read it",
    );
  });

  it("names late auth replicas, alone or beside late gateways", () => {
    expect(propagationWarning(propagation({ authConfirmed: 1 }))).toMatch(
      /^warning: 1 of 2 auth replicas had not confirmed the change after 1200 ms/,
    );
    expect(propagationWarning(propagation({ confirmed: 0, authConfirmed: 0 }))).toMatch(
      /^warning: 2 of 2 gateways and 2 of 2 auth replicas had not confirmed/,
    );
  });
});
