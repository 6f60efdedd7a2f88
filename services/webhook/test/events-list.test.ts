import { describe, expect, it } from "@jest/globals";
import { cursorFilter, EVENTS_ORDER, pageFilter } from "../src/events-list.js";

// GET /v1/events, the webhook service's half: which events a page holds. Run against MongoDB in
// webhook-service.integration.test.ts and end to end in test/e2e/events-list.test.ts.

const page = { partnerId: "ptr_a", mode: "live" as const, limit: 10 };

describe("the events list's queries", () => {
  it("looks a cursor up only among the partner's own events of the mode: another partner's id, or the other mode's, finds nothing", () => {
    expect(cursorFilter(page, "evt_x")).toEqual({ _id: "evt_x", partnerId: "ptr_a", mode: "live" });
    expect(cursorFilter({ partnerId: "ptr_b", mode: "test" }, "evt_x")).toEqual({
      _id: "evt_x",
      partnerId: "ptr_b",
      mode: "test",
    });
  });

  it("a first page: the partner's events of the mode, of the type when one is given", () => {
    expect(pageFilter(page)).toEqual({ partnerId: "ptr_a", mode: "live" });
    expect(pageFilter({ ...page, type: "connection.revoked" })).toEqual({
      partnerId: "ptr_a",
      mode: "live",
      type: "connection.revoked",
    });
  });

  it("a later page: strictly older than the cursor in (createdAt, seq, _id), so events stored in one batch (one createdAt) are neither skipped nor repeated", () => {
    const at = new Date(1_767_225_600_000);
    expect(pageFilter(page, { _id: "evt_m", createdAt: at, seq: 41 })).toEqual({
      partnerId: "ptr_a",
      mode: "live",
      $or: [
        { createdAt: { $lt: at } },
        { createdAt: at, seq: { $lt: 41 } },
        { createdAt: at, seq: 41, _id: { $lt: "evt_m" } },
      ],
    });
    expect(EVENTS_ORDER).toEqual({ createdAt: -1, seq: -1, _id: -1 });
  });
});
