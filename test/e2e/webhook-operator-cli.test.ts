import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { opsCliEnv, opsFor, runOpsCli, type CliRun } from "../support/partner-api.js";

// The webhook operator commands added beside the contract's, run as an operator runs them: the
// compiled CLI (built by `npm test`) in its own process, with --json.

let stack: TestStack;
beforeAll(async () => {
  stack = await startTestStack();
});
afterAll(async () => {
  await stack?.stop();
});

const ops = (...args: string[]) => runOpsCli(opsCliEnv(stack.settings), [...args, "--json"]);
function oneObject(run: CliRun): Record<string, unknown> {
  expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
  expect(run.stdout.trim().split("\n")).toHaveLength(1);
  return JSON.parse(run.stdout) as Record<string, unknown>;
}
function refused(run: CliRun): string {
  expect(run.code).not.toBe(0);
  expect(run.stdout).toBe("");
  expect(run.stderr.trim().split("\n")).toHaveLength(1);
  return run.stderr.trim();
}

describe("webhook operator commands (compiled CLI)", () => {
  it("partner rotate-signing-secret shows the new secret once, with the overlap's end (24 h by default)", async () => {
    const partner = await opsFor(stack.settings).partnerCreate({ name: "CLI Rotation Clinic" });
    const before = Date.now();
    const out = oneObject(await ops("partner", "rotate-signing-secret", partner.partner_id));
    expect(out).toEqual({ partner_id: partner.partner_id, signing_secret: expect.stringMatching(/^whsec_/), previous_expires_at: expect.any(String) });
    const ends = Date.parse(out.previous_expires_at as string);
    expect(ends - before).toBeGreaterThanOrEqual(24 * 3600_000 - 5_000);
    expect(ends - before).toBeLessThanOrEqual(24 * 3600_000 + 60_000);
    const short = oneObject(await ops("partner", "rotate-signing-secret", partner.partner_id, "--overlap-hours", "0.5"));
    expect(Date.parse(short.previous_expires_at as string) - Date.now()).toBeLessThanOrEqual(1800_000);
    expect(short.signing_secret).not.toBe(out.signing_secret);
  });

  it.each([
    [["partner", "rotate-signing-secret", "ptr_nosuchpartner"], /NotFound/],
    [["partner", "rotate-signing-secret", "ptr_x", "--overlap-hours", "200"], /overlap-hours/],
    [["webhook", "attempts", "evt_nosuchevent"], /NotFound/],
    [["webhook", "resend", "not-an-event"], /evt_/],
    [["webhook", "recover", "ptr_x", "--since", "yesterday"], /ISO 8601/],
    [["webhook", "recover", "ptr_x"], /since/],
  ])("%j is refused with one line", async (args, reason) => {
    expect(refused(await ops(...args))).toMatch(reason);
  });

  it("webhook deliveries keeps the contract's deliveries and adds the endpoint's health", async () => {
    const partner = await opsFor(stack.settings).partnerCreate({ name: "CLI Health Lab" });
    const out = oneObject(await ops("webhook", "deliveries", partner.partner_id));
    expect(out).toEqual({ deliveries: [], endpoint: { state: "ok", failing_since: null, last_success_at: null } });
    expect(oneObject(await ops("webhook", "recover", partner.partner_id, "--since", "2026-01-01T00:00:00Z"))).toEqual({ partner_id: partner.partner_id, requeued: 0, event_ids: [] });
  });
});
