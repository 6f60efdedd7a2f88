import { describe, expect, it } from "@jest/globals";
import { Status } from "@pi/common/rpc/errors";
import { newId } from "@pi/common/rules/ids";
import { shapeAudit } from "@pi/common/store/audit";
import { actorOf, connectionAudit, partnerActor } from "../src/audit.js";
import type { Trigger } from "../src/state-machine.js";

// Who does what to a connection, as its audit records say (docs/security.md, "Audit trail").

const partnerId = newId("ptr");
const doc = { _id: newId("con"), partnerId };

describe("connection audit records", () => {
  it.each<[Trigger, string, string]>([
    ["request", "connection.request", partnerId],
    ["delete", "connection.delete", partnerId],
    ["approve", "connection.approve", "caregiver"],
    ["decline", "connection.decline", "caregiver"],
    ["sever", "connection.sever", "caregiver"],
    ["auto_approve", "connection.auto_approve", "system"],
    ["expire", "connection.expire", "system"],
    // The test helpers: the same actions, pulled by the partner on its own test connections.
    ["test_approve", "connection.approve", partnerId],
    ["test_decline", "connection.decline", partnerId],
    ["test_sever", "connection.sever", partnerId],
    ["test_expire", "connection.expire", partnerId],
  ])("%s is %s by %s", (trigger, action, actor) => {
    const elderId = newId("eld");
    const fields = connectionAudit(trigger, doc, elderId);
    expect(fields).toEqual({ action, actor, targets: [doc._id, partnerId, elderId] });
    expect(shapeAudit("connection", fields).targets).toEqual([doc._id, partnerId, elderId]);
  });

  it("a connection whose address resolved to no elder names no elder", () => {
    expect(shapeAudit("connection", connectionAudit("request", doc, null)).targets).toEqual([doc._id, partnerId]);
  });

  it("a partner's act needs a partner id as its actor; the caregiver's and the system's do not", () => {
    expect(partnerActor(partnerId)).toBe(partnerId);
    for (const bad of ["", "p1", "ptr_", "ptr_a-b", "amber.falcon.river@elders.example"]) {
      expect(() => partnerActor(bad)).toThrow(expect.objectContaining({ code: Status.INVALID_ARGUMENT }));
    }
    expect(actorOf("decline", "whatever")).toBe("caregiver");
    expect(actorOf("expire", "")).toBe("system");
  });
});
