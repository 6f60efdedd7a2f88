import { afterAll, beforeAll, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../test/support/services.js";
import { accessToken, call, opsFor } from "../test/support/partner-api.js";
import { collectConnectionEvents, type EventCollector } from "../test/support/connection-events.js";
import { percentile, report } from "./report.js";

// Connections: how alike POST /v1/connections is in time for addresses that resolve and addresses
// that do not (no-oracle guarantee 1), and how long a caregiver's approval takes to reach Kafka
// through the outbox.

let stack: TestStack;
let events: EventCollector;
let ops: ReturnType<typeof opsFor>;
let token: string;

beforeAll(async () => {
  stack = await startTestStack({ RATE_LIMIT_V1_PER_SECOND: "100000" });
  events = await collectConnectionEvents(stack.settings.KAFKA_BROKERS, stack.settings.DATA_NAMESPACE);
  ops = opsFor(stack.settings);
  const partner = await ops.partnerCreate({ name: "Bench Pharmacy" });
  token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
});

afterAll(async () => {
  await events?.stop();
  await stack?.stop();
});

const median = (xs: number[]) => percentile(xs, 50);
/** A distinct lowercase word for every n (base 26 in the letters a-z, at least two of them). */
const word = (n: number) =>
  [...n.toString(26)]
    .map((c) => String.fromCharCode(97 + parseInt(c, 26)))
    .join("")
    .padStart(2, "a");

it("POST /v1/connections: resolved vs unresolvable addresses, interleaved", async () => {
  const samples = 150;
  const resolved = [];
  for (let i = 0; i < samples; i++) resolved.push((await ops.elderCreate()).address);
  const unresolved = Array.from(
    { length: samples },
    (_, i) => `${word(i)}.unknown.person@${stack.settings.ADDRESS_DOMAIN}`,
  );
  const time = async (elder: string) => {
    const started = performance.now();
    const res = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder });
    if (res.status !== 202) throw new Error(`unexpected ${res.status} ${res.text}`);
    return performance.now() - started;
  };
  for (let i = 0; i < 10; i++) await time(`${word(10_000 + i)}.warm.up@${stack.settings.ADDRESS_DOMAIN}`);
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < samples; i++) {
    // Alternate which goes first so drift in load hits both alike.
    if (i % 2 === 0) {
      a.push(await time(resolved[i]!));
      b.push(await time(unresolved[i]!));
    } else {
      b.push(await time(unresolved[i]!));
      a.push(await time(resolved[i]!));
    }
  }
  report("connections: POST latency by resolution (ms)", {
    samples,
    resolved_p50: median(a),
    unresolvable_p50: median(b),
    resolved_p95: percentile(a, 95),
    unresolvable_p95: percentile(b, 95),
    p50_difference: median(a) - median(b),
  });
});

it("caregiver approval to connection.approved on Kafka (outbox relay)", async () => {
  const samples = 30;
  const latencies: number[] = [];
  for (let i = 0; i < samples; i++) {
    const { address } = await ops.elderCreate();
    const res = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: address });
    const id = res.json!.id as string;
    const started = performance.now();
    await ops.connectionAct("approve", id);
    await events.waitFor(() => events.of(id).length === 1, 10_000);
    latencies.push(performance.now() - started);
  }
  report("connections: approve -> event on Kafka (ms)", {
    samples,
    p50: median(latencies),
    p95: percentile(latencies, 95),
    max: Math.max(...latencies),
  });
});
