import { describe, expect, it } from "@jest/globals";
import { GATEWAY_LIVENESS_MS, gatewaysBehind } from "../src/propagation.js";

// The operator contract: a revocation's effect is visible to the partner API when the command
// exits. The auth service waits for every live gateway whose position is not past the event.

const now = 1_000_000;
const gw = (id: string, next: Record<string, number>, ageMs = 0) => ({ _id: id, nextOffsets: next, seenAt: new Date(now - ageMs) });

describe("which gateways the auth service waits for", () => {
  it("a gateway that has applied the event (next offset past it) is not waited for", () => {
    expect(gatewaysBehind([gw("a", { "0": 8 })], 0, 7, now)).toEqual([]);
  });

  it("a gateway whose next offset is the event itself, or that has not read the partition, is behind", () => {
    expect(gatewaysBehind([gw("a", { "0": 7 }), gw("b", {})], 0, 7, now).map((g) => g._id)).toEqual(["a", "b"]);
  });

  it("offsets are per partition", () => {
    expect(gatewaysBehind([gw("a", { "0": 100, "1": 3 })], 1, 3, now).map((g) => g._id)).toEqual(["a"]);
  });

  it("a gateway silent for longer than the liveness window is taken for dead and not waited for", () => {
    expect(gatewaysBehind([gw("dead", { "0": 0 }, GATEWAY_LIVENESS_MS + 1)], 0, 7, now)).toEqual([]);
  });
});
