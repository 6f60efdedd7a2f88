import { describe, expect, it } from "@jest/globals";
import {
  effectiveStatus,
  externalStatus,
  initialState,
  transition,
  type ConnectionState,
  type EventType,
  type InternalStatus,
  type Timing,
  type Trigger,
} from "../src/state-machine.js";

const now = new Date("2030-01-01T00:00:00Z");
const ttl = 100;
const delay = 30;
const t: Timing = { now, pendingTtlSeconds: ttl, sandboxDelaySeconds: delay };
const ago = (s: number) => new Date(now.getTime() - s * 1000);
const later = (s: number) => new Date(now.getTime() + s * 1000);

/** A live connection whose address resolved, requested `age` seconds ago, unless told otherwise. */
function st(status: InternalStatus, o: Partial<ConnectionState> & { age?: number } = {}): ConnectionState {
  const { age = 10, ...rest } = o;
  return { status, mode: "live", resolved: true, pendingSince: ago(age), approveAt: null, ...rest };
}
/** A test connection to the sandbox elder, still waiting for its automatic approval. */
const sandboxWaiting = (dueIn: number, age = 10) => st("pending", { mode: "test", age, approveAt: later(dueIn) });

const change = (to: InternalStatus, event: EventType | null = null) =>
  expect.objectContaining({ kind: "change", to, event });
const unchanged = { kind: "unchanged" };
const refused = expect.objectContaining({ kind: "refused", reason: expect.any(String) });

describe("creation (POST /v1/connections, first time)", () => {
  it("any well-formed address, resolved or not, starts pending", () => {
    for (const mode of ["live", "test"] as const) {
      for (const resolved of [true, false]) {
        expect(initialState(mode, resolved, t)).toMatchObject({ status: "pending", pendingSince: now });
        expect(externalStatus(initialState(mode, resolved, t), t)).toBe("pending");
      }
    }
  });

  it("only a test connection whose address resolved (the sandbox elder) is scheduled for auto-approval", () => {
    expect(initialState("test", true, t).approveAt).toEqual(later(delay));
    expect(initialState("test", false, t).approveAt).toBeNull();
    expect(initialState("live", true, t).approveAt).toBeNull();
    expect(initialState("live", false, t).approveAt).toBeNull();
  });
});

describe("external view", () => {
  it.each([
    ["pending", "pending"],
    ["declined", "pending"],
    ["approved", "approved"],
    ["expired", "expired"],
    ["revoked", "revoked"],
  ] as const)("%s reads %s", (internal, external) => {
    expect(externalStatus(st(internal), t)).toBe(external);
  });

  it("a pending connection older than CONNECTION_PENDING_TTL_SECONDS reads expired before any sweep", () => {
    expect(externalStatus(st("pending", { age: ttl - 1 }), t)).toBe("pending");
    expect(externalStatus(st("pending", { age: ttl }), t)).toBe("expired");
    expect(effectiveStatus(st("pending", { age: ttl + 1 }), t)).toBe("expired");
  });

  it("guarantee 4: a declined connection reads exactly like an undecided one at every age", () => {
    for (const age of [0, 1, ttl - 1, ttl, ttl + 1, 100 * ttl]) {
      expect(externalStatus(st("declined", { age }), t)).toBe(externalStatus(st("pending", { age }), t));
    }
  });

  it("a test connection waiting for sandbox auto-approval never expires, whatever the TTL", () => {
    expect(externalStatus(sandboxWaiting(5, 100 * ttl), t)).toBe("pending");
    expect(externalStatus(sandboxWaiting(-5, 100 * ttl), t)).toBe("pending");
  });

  it("a test connection to a real address (unresolvable to a test token) expires like any unresolved one", () => {
    expect(externalStatus(st("pending", { mode: "test", resolved: false, age: ttl }), t)).toBe("expired");
  });

  it("approved and revoked do not expire", () => {
    expect(externalStatus(st("approved", { age: 100 * ttl }), t)).toBe("approved");
    expect(externalStatus(st("revoked", { age: 100 * ttl }), t)).toBe("revoked");
  });
});

describe("request again (POST for an existing (partner, address))", () => {
  it.each(["pending", "declined", "approved"] as const)("%s: unchanged, same connection", (status) => {
    expect(transition(st(status), "request", t)).toEqual(unchanged);
  });

  it.each([
    ["expired", st("expired", { age: 5 * ttl })],
    ["pending past its window", st("pending", { age: ttl + 1 })],
    ["declined past its window", st("declined", { age: ttl + 1 })],
    ["revoked", st("revoked")],
  ])("%s: a new pending window, no event", (_, state) => {
    expect(transition(state, "request", t)).toEqual({
      kind: "change",
      to: "pending",
      pendingSince: now,
      approveAt: null,
      event: null,
    });
  });

  it("a revoked sandbox connection re-requested with a test token is scheduled for auto-approval again", () => {
    expect(transition(st("revoked", { mode: "test" }), "request", t)).toMatchObject({
      to: "pending",
      approveAt: later(delay),
    });
  });
});

describe("caregiver approves", () => {
  it("pending -> approved, emits connection.approved", () => {
    expect(transition(st("pending"), "approve", t)).toEqual(change("approved", "connection.approved"));
  });
  it("declined -> approved, emits connection.approved (the caregiver may change their mind)", () => {
    expect(transition(st("declined"), "approve", t)).toEqual(change("approved", "connection.approved"));
  });
  it("approved: unchanged (idempotent, no second event)", () => {
    expect(transition(st("approved"), "approve", t)).toEqual(unchanged);
  });
  it("refused when the address did not resolve to an elder: consent needs a resolved elder", () => {
    expect(transition(st("pending", { resolved: false }), "approve", t)).toEqual(refused);
  });
  it.each([
    ["expired", st("expired")],
    ["pending past its window", st("pending", { age: ttl })],
    ["declined past its window", st("declined", { age: ttl })],
    ["revoked", st("revoked")],
  ])("refused for %s", (_, state) => {
    expect(transition(state, "approve", t)).toEqual(refused);
  });
  it("refused on test connections, to the sandbox or not (no human acts in test mode)", () => {
    expect(transition(sandboxWaiting(5), "approve", t)).toEqual(refused);
    expect(transition(st("pending", { mode: "test", resolved: false }), "approve", t)).toEqual(refused);
  });
});

describe("caregiver declines", () => {
  it("pending -> declined, no event", () => {
    expect(transition(st("pending"), "decline", t)).toEqual(change("declined", null));
  });
  it("declined: unchanged", () => {
    expect(transition(st("declined"), "decline", t)).toEqual(unchanged);
  });
  it.each([
    ["approved", st("approved")],
    ["expired", st("expired")],
    ["pending past its window", st("pending", { age: ttl })],
    ["revoked", st("revoked")],
    ["unresolved", st("pending", { resolved: false })],
    ["test", sandboxWaiting(5)],
  ])("refused for %s", (_, state) => {
    expect(transition(state, "decline", t)).toEqual(refused);
  });
});

describe("caregiver severs", () => {
  it("approved -> revoked, emits connection.revoked", () => {
    expect(transition(st("approved"), "sever", t)).toEqual(change("revoked", "connection.revoked"));
  });
  it("revoked: unchanged (idempotent, no second event)", () => {
    expect(transition(st("revoked"), "sever", t)).toEqual(unchanged);
  });
  it.each(["pending", "declined", "expired"] as const)(
    "refused for %s (only an approved connection is severed)",
    (status) => {
      expect(transition(st(status), "sever", t)).toEqual(refused);
    },
  );
  it("refused on an approved test connection", () => {
    expect(transition(st("approved", { mode: "test" }), "sever", t)).toEqual(refused);
  });
});

describe("sandbox auto-approval", () => {
  it("pending (test, sandbox) -> approved once due, emits connection.approved", () => {
    expect(transition(sandboxWaiting(0), "auto_approve", t)).toEqual({
      kind: "change",
      to: "approved",
      approveAt: null,
      event: "connection.approved",
    });
    expect(transition(sandboxWaiting(-60), "auto_approve", t)).toEqual(change("approved", "connection.approved"));
  });
  it("still approves when due long after the pending window would have ended", () => {
    expect(transition(sandboxWaiting(-1, 100 * ttl), "auto_approve", t)).toEqual(
      change("approved", "connection.approved"),
    );
  });
  it.each([
    ["not yet due", sandboxWaiting(1)],
    ["a live connection", st("pending")],
    ["a test connection to a real address", st("pending", { mode: "test", resolved: false })],
    ["already approved", st("approved", { mode: "test" })],
    ["revoked by the partner before it was due", st("revoked", { mode: "test" })],
  ])("unchanged for %s", (_, state) => {
    expect(transition(state, "auto_approve", t)).toEqual(unchanged);
  });
});

describe("partner DELETE", () => {
  it("approved -> revoked, emits connection.revoked", () => {
    expect(transition(st("approved"), "delete", t)).toEqual(change("revoked", "connection.revoked"));
  });
  it.each([
    ["pending", st("pending")],
    ["declined", st("declined")],
    ["expired", st("expired")],
    ["pending past its window", st("pending", { age: ttl })],
    ["unresolved", st("pending", { resolved: false })],
  ])("%s -> revoked without an event", (_, state) => {
    expect(transition(state, "delete", t)).toEqual(change("revoked", null));
  });
  it("a sandbox connection waiting for auto-approval -> revoked, and the schedule is dropped", () => {
    expect(transition(sandboxWaiting(5), "delete", t)).toEqual({
      kind: "change",
      to: "revoked",
      approveAt: null,
      event: null,
    });
  });
  it("revoked: unchanged (idempotent)", () => {
    expect(transition(st("revoked"), "delete", t)).toEqual(unchanged);
  });
});

describe("expiry sweep", () => {
  it.each(["pending", "declined"] as const)("%s past its window -> expired, no event", (status) => {
    expect(transition(st(status, { age: ttl }), "expire", t)).toEqual(change("expired", null));
  });
  it.each([
    ["pending within its window", st("pending", { age: ttl - 1 })],
    ["a sandbox connection waiting for approval", sandboxWaiting(5, 100 * ttl)],
    ["approved", st("approved", { age: 100 * ttl })],
    ["revoked", st("revoked", { age: 100 * ttl })],
    ["already expired", st("expired", { age: 100 * ttl })],
  ])("unchanged for %s", (_, state) => {
    expect(transition(state, "expire", t)).toEqual(unchanged);
  });
});

describe("test helpers (a partner's own test connections)", () => {
  // The caregiver's acts under the caregiver's rules, on test connections only; expire ends a pending window now.
  const sandboxed = (status: InternalStatus) => st(status, { mode: "test" });

  it("approve: pending (still waiting for the automatic approval) -> approved with connection.approved, and the schedule is dropped", () => {
    expect(transition(sandboxWaiting(20), "test_approve", t)).toEqual({
      kind: "change",
      to: "approved",
      approveAt: null,
      event: "connection.approved",
    });
  });
  it("approve: declined -> approved, as the caregiver may; approved: unchanged (no second event)", () => {
    expect(transition(sandboxed("declined"), "test_approve", t)).toEqual(change("approved", "connection.approved"));
    expect(transition(sandboxed("approved"), "test_approve", t)).toEqual(unchanged);
  });
  it("the automatic approval does nothing once a helper approved or declined", () => {
    for (const trigger of ["test_approve", "test_decline"] as const) {
      const outcome = transition(sandboxWaiting(5), trigger, t);
      if (outcome.kind !== "change") throw new Error(`${trigger} did not change`);
      const after = { ...sandboxWaiting(-60), status: outcome.to, approveAt: outcome.approveAt };
      expect(transition(after, "auto_approve", t)).toEqual(unchanged);
    }
  });
  it("decline: pending -> declined, no event, no schedule; it reads pending, then expired when its window ends (guarantee 4)", () => {
    expect(transition(sandboxWaiting(5), "test_decline", t)).toEqual({
      kind: "change",
      to: "declined",
      approveAt: null,
      event: null,
    });
    expect(externalStatus(st("declined", { mode: "test", age: ttl - 1 }), t)).toBe("pending");
    expect(externalStatus(st("declined", { mode: "test", age: ttl }), t)).toBe("expired");
    expect(transition(sandboxed("declined"), "test_decline", t)).toEqual(unchanged);
  });
  it("sever: approved -> revoked with connection.revoked; revoked: unchanged", () => {
    expect(transition(sandboxed("approved"), "test_sever", t)).toEqual(change("revoked", "connection.revoked"));
    expect(transition(sandboxed("revoked"), "test_sever", t)).toEqual(unchanged);
  });
  it("expire: pending or declined -> expired at once, no event, whatever its age; expired: unchanged", () => {
    expect(transition(sandboxWaiting(5, 1), "test_expire", t)).toEqual({
      kind: "change",
      to: "expired",
      approveAt: null,
      event: null,
    });
    expect(transition(sandboxed("declined"), "test_expire", t)).toEqual(change("expired", null));
    expect(transition(st("pending", { mode: "test", resolved: false }), "test_expire", t)).toEqual(
      change("expired", null),
    );
    expect(transition(sandboxed("expired"), "test_expire", t)).toEqual(unchanged);
  });
  it.each([
    ["sever", "a pending connection", "test_sever", sandboxWaiting(5)],
    ["sever", "a declined connection", "test_sever", sandboxed("declined")],
    ["approve", "an expired connection", "test_approve", sandboxed("expired")],
    ["approve", "a revoked connection", "test_approve", sandboxed("revoked")],
    [
      "approve",
      "a connection to a real address (no elder to consent)",
      "test_approve",
      st("pending", { mode: "test", resolved: false }),
    ],
    ["decline", "an approved connection", "test_decline", sandboxed("approved")],
    ["decline", "an expired connection", "test_decline", sandboxed("expired")],
    ["expire", "an approved connection", "test_expire", sandboxed("approved")],
    ["expire", "a revoked connection", "test_expire", sandboxed("revoked")],
  ] as const)("%s of %s is refused", (_, __, trigger, state) => {
    expect(transition(state, trigger, t)).toEqual(refused);
  });
  it.each(["test_approve", "test_decline", "test_sever", "test_expire"] as const)(
    "%s is refused on every live connection, in every status",
    (trigger) => {
      for (const status of ["pending", "approved", "declined", "expired", "revoked"] as const) {
        expect(transition(st(status), trigger, t)).toEqual({
          kind: "refused",
          reason: "test helpers act only on test connections",
        });
      }
    },
  );
});

describe("events", () => {
  it("only approve, auto-approval, sever and DELETE of an approved connection emit (the test helpers' approve and sever on test ones), and only the two event types", () => {
    const statuses: InternalStatus[] = ["pending", "approved", "declined", "expired", "revoked"];
    const triggers: Trigger[] = [
      "request",
      "approve",
      "decline",
      "sever",
      "auto_approve",
      "delete",
      "expire",
      "test_approve",
      "test_decline",
      "test_sever",
      "test_expire",
    ];
    const emitting: string[] = [];
    for (const mode of ["live", "test"] as const) {
      for (const status of statuses) {
        for (const age of [10, ttl]) {
          for (const trigger of triggers) {
            const state = st(status, {
              mode,
              age,
              approveAt: mode === "test" && status === "pending" ? later(-1) : null,
            });
            const outcome = transition(state, trigger, t);
            if (outcome.kind === "change" && outcome.event)
              emitting.push(`${mode} ${effectiveStatus(state, t)} ${trigger} ${outcome.event}`);
          }
        }
      }
    }
    expect([...new Set(emitting)].sort()).toEqual([
      "live approved delete connection.revoked",
      "live approved sever connection.revoked",
      "live declined approve connection.approved",
      "live pending approve connection.approved",
      "test approved delete connection.revoked",
      "test approved test_sever connection.revoked",
      "test declined test_approve connection.approved",
      "test pending auto_approve connection.approved",
      "test pending test_approve connection.approved",
    ]);
  });
});
