import { describe, expect, it } from "@jest/globals";
import { FOLLOWER_LIVENESS_MS } from "@pi/common/events/partner-event-feed";
import { followersBehind } from "../src/propagation.js";

// The operator contract: a revocation's effect is visible to the partner API when the command
// exits. The auth service waits for every live follower of the partner events (gateway or auth
// replica) whose position is not past the event.

const now = 1_000_000;
const gw = (id: string, next: Record<string, number>, ageMs = 0) => ({
  _id: id,
  nextOffsets: next,
  seenAt: new Date(now - ageMs),
});

describe("which gateways and auth replicas the auth service waits for", () => {
  it("a gateway that has applied the event (next offset past it) is not waited for", () => {
    expect(followersBehind([gw("a", { "0": 8 })], [{ partition: 0, offset: 7n }], now)).toEqual([]);
  });

  it("a gateway whose next offset is the event itself, or that has not read the partition, is behind", () => {
    expect(
      followersBehind([gw("a", { "0": 7 }), gw("b", {})], [{ partition: 0, offset: 7n }], now).map((g) => g._id),
    ).toEqual(["a", "b"]);
  });

  it("offsets are per partition", () => {
    expect(
      followersBehind([gw("a", { "0": 100, "1": 3 })], [{ partition: 1, offset: 3n }], now).map((g) => g._id),
    ).toEqual(["a"]);
  });

  it("a gateway silent for longer than the liveness window is taken for dead and not waited for", () => {
    expect(
      followersBehind([gw("dead", { "0": 0 }, FOLLOWER_LIVENESS_MS + 1)], [{ partition: 0, offset: 7n }], now),
    ).toEqual([]);
  });

  it("an event published by another relay (its offset unknown) is waited for as every partition's last", () => {
    const lasts = [
      { partition: 0, offset: 7n },
      { partition: 1, offset: 3n },
    ];
    const followers = [gw("a", { "0": 8, "1": 4 }), gw("b", { "0": 8, "1": 3 })];
    expect(followersBehind(followers, lasts, now).map((g) => g._id)).toEqual(["b"]);
  });

  it("auth replicas are waited for like gateways", () => {
    const replica = { ...gw("auth-1", { "0": 7 }), kind: "auth" as const };
    expect(
      followersBehind([replica, gw("a", { "0": 8 })], [{ partition: 0, offset: 7n }], now).map((f) => f._id),
    ).toEqual(["auth-1"]);
  });
});
