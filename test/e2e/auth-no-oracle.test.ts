import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Agent, request } from "node:http";
import { startTestStack, type TestStack } from "../support/services.js";
import { basicAuthorization, opsFor } from "../support/partner-api.js";
import { NO_RATE_LIMITS } from "../support/auth.js";

// No-oracle guarantee 5: every credential failure at the token endpoint (unknown client, bad
// secret, revoked credential, suspended partner) returns the identical invalid_client error, in
// body and headers (only Date may differ), with equivalent timing.

let stack: TestStack;
type Failure = "unknown client" | "wrong secret" | "revoked credential" | "suspended partner";
type Kind = `${Failure} (${"body" | "basic"})`;
const bodies = {} as Record<Failure, Record<string, string>>;

beforeAll(async () => {
  stack = await startTestStack(NO_RATE_LIMITS);
  const ops = opsFor(stack.settings);
  const ok = await ops.partnerCreate({ name: "Good Standing Clinic" });
  const revoked = await ops.partnerCreate({ name: "Revoked Credential Clinic" });
  await ops.credentialRevoke(revoked.live.client_id);
  const suspended = await ops.partnerCreate({ name: "Suspended Clinic" });
  await ops.partnerSetStatus(suspended.partner_id, "suspended");
  const grant = "client_credentials";
  bodies["unknown client"] = { grant_type: grant, client_id: "cli_0000000000000000000000", client_secret: ok.live.client_secret };
  bodies["wrong secret"] = { grant_type: grant, client_id: ok.live.client_id, client_secret: revoked.live.client_secret };
  bodies["revoked credential"] = { grant_type: grant, client_id: revoked.live.client_id, client_secret: revoked.live.client_secret };
  bodies["suspended partner"] = { grant_type: grant, client_id: suspended.live.client_id, client_secret: suspended.live.client_secret };
});
afterAll(async () => {
  await stack?.stop();
});

const failures = (): Failure[] => Object.keys(bodies) as Failure[];
const kinds = (): Kind[] => failures().flatMap((f) => [`${f} (body)`, `${f} (basic)`] as Kind[]);

/** The request of one kind: the credentials in the body, or in a Basic header with only grant_type in the body. */
function requestOf(kind: Kind, encoding: keyof typeof encodings): [string, string, Record<string, string>] {
  const [failure, method] = kind.split(" (") as [Failure, string];
  const { client_id, client_secret, ...rest } = bodies[failure];
  if (method === "body)") return [...encodings[encoding](bodies[failure]), {}];
  return [...encodings[encoding](rest), { authorization: basicAuthorization(client_id!, client_secret!) }];
}

// One kept-alive connection for the timing samples: less scheduling noise than a connection each.
const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });
afterAll(() => keepAlive.destroy());

/** One request (on a fresh connection unless `agent` is given), with the raw header lines as sent. */
function post(body: string, contentType: string, extraHeaders: Record<string, string> = {}, agent: Agent | false = false): Promise<{ status: number; rawHeaders: string[]; text: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = request(`${stack.baseUrl}/oauth/token`, { method: "POST", agent, headers: { "content-type": contentType, "content-length": Buffer.byteLength(body), ...extraHeaders } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, rawHeaders: res.rawHeaders, text: Buffer.concat(chunks).toString(), ms: performance.now() - started }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

const encodings = {
  form: (b: Record<string, string>) => [new URLSearchParams(b).toString(), "application/x-www-form-urlencoded"] as const,
  json: (b: Record<string, string>) => [JSON.stringify(b), "application/json"] as const,
};

/** Header lines in order, without Date, as "Name: value". */
const headerLines = (raw: string[]) =>
  raw.flatMap((v, i) => (i % 2 === 0 ? [`${v}: ${raw[i + 1]}`] : [])).filter((line) => !/^date:/i.test(line));

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

describe("no-oracle guarantee 5", () => {
  it.each(Object.keys(encodings) as (keyof typeof encodings)[])(
    "no-oracle guarantee 5: the four credential failures, by body fields and by HTTP Basic, give byte-identical bodies and headers apart from Date (%s body)",
    async (encoding) => {
      const results = [];
      for (const kind of kinds()) results.push({ kind, ...(await post(...requestOf(kind, encoding))) });
      for (const r of results) {
        expect(r.status).toBe(400);
        expect(JSON.parse(r.text)).toEqual({ error: "invalid_client", error_description: expect.any(String) });
      }
      const [first, ...rest] = results;
      for (const r of rest) {
        expect({ kind: r.kind, text: r.text }).toEqual({ kind: r.kind, text: first!.text });
        expect({ kind: r.kind, headers: headerLines(r.rawHeaders) }).toEqual({ kind: r.kind, headers: headerLines(first!.rawHeaders) });
      }
      expect(headerLines(first!.rawHeaders)).toEqual(expect.arrayContaining(["Cache-Control: no-store"]));
    },
  );

  it("no-oracle guarantee 5: median latencies of the four failures, by body fields and by HTTP Basic, over interleaved samples differ by less than 35% or 3 ms", async () => {
    // Interleaved in a fresh random order each round, so drift in the machine's load falls on every
    // kind alike. On a shared machine a burst of load can still skew one sample set, so the bar
    // must be met by one of three independent measurements; a real difference fails all three.
    const measure = async () => {
      const samples = Object.fromEntries(kinds().map((k) => [k, [] as number[]])) as Record<Kind, number[]>;
      for (let round = -5; round < 60; round++) {
        for (const kind of kinds().sort(() => Math.random() - 0.5)) {
          const { ms, status } = await post(...requestOf(kind, "form"), keepAlive);
          expect(status).toBe(400);
          if (round >= 0) samples[kind].push(ms);
        }
      }
      return Object.fromEntries(kinds().map((k) => [k, median(samples[k])])) as Record<Kind, number>;
    };
    const unequal = (medians: Record<Kind, number>) =>
      kinds().flatMap((a) =>
        kinds()
          .filter((b) => a < b)
          .filter((b) => {
            const diff = Math.abs(medians[a] - medians[b]);
            return !(diff < 3 || diff / Math.min(medians[a], medians[b]) < 0.35);
          })
          .map((b) => `${a} / ${b}`),
      );
    const attempts: { medians: Record<Kind, number>; unequal: string[] }[] = [];
    do {
      const medians = await measure();
      attempts.push({ medians, unequal: unequal(medians) });
    } while (attempts.at(-1)!.unequal.length > 0 && attempts.length < 3);
    const rounded = attempts.map((a) => Object.fromEntries(Object.entries(a.medians).map(([k, v]) => [k, Math.round(v * 100) / 100])));
    process.stderr.write(`guarantee 5 medians (ms), per attempt: ${JSON.stringify(rounded)}\n`);
    expect(attempts.at(-1)!.unequal).toEqual([]);
  }, 240_000);
});
