import { afterAll, beforeAll, it } from "@jest/globals";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { LOCAL_IDENTITY_FILE, withLocalStackIdentity } from "../deploy/local/src/state-files.js";
import { publicKeyEntry } from "@pi/common/rpc/service-identity";
import { NO_RATE_LIMITS } from "../test/support/auth.js";
import { connectedPartner, sendFile, waitForStatus, type ConnectedPartner } from "../test/support/files.js";
import { freePort } from "../test/support/gateway-process.js";
import { LoadGenerator } from "./support/driver.js";
import { knobs } from "./support/knobs.js";
import { startLocalStack, type LocalStack } from "./support/local-stack.js";
import { cpuMeter } from "./support/procfs.js";
import { median, report } from "./report.js";

// What Prometheus metrics cost the gateway (issue 25): two gateway processes beside the local stack
// (npm start's, in front of the same services), one with metrics (METRICS_ENABLED=true: the
// request histogram, the call histograms, the runtime's collectors, a scrape every second) and one
// without (METRICS_ENABLED=false); the same GET /v1/files/{id} against each, in alternating rounds;
// the CPU each gateway process used per request (/proc), median of the rounds. Figures only.

let stack: LocalStack;
let load: LoadGenerator;
let partner: ConnectedPartner;
const gateways: { name: string; pid: number; baseUrl: string; metricsUrl?: string; child: ChildProcess }[] = [];

async function startGateway(name: string, metrics: boolean) {
  const port = await freePort();
  const metricsPort = await freePort();
  const kafkaUsers = JSON.parse(readFileSync(join(stack.stateDir, "kafka-users.json"), "utf8")) as Record<
    string,
    string
  >;
  const identities = JSON.parse(readFileSync(join(stack.stateDir, LOCAL_IDENTITY_FILE), "utf8")) as Record<
    string,
    string
  >;
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    ...Object.fromEntries(
      Object.entries(stack.settings).flatMap(([k, v]) =>
        v === undefined ? [] : [[k, typeof v === "object" ? JSON.stringify(v) : String(v)]],
      ),
    ),
    ...(withLocalStackIdentity({}, stack.stateDir, "gateway") as Record<string, string>),
    SERVICE_IDENTITY_PUBLIC_KEYS: Object.values(identities).map(publicKeyEntry).join(","),
    ...NO_RATE_LIMITS,
    KAFKA_USERNAME: "gateway",
    KAFKA_PASSWORD: kafkaUsers.gateway!,
    GATEWAY_PORT: String(port),
    METRICS_PORT: String(metricsPort),
    METRICS_ENABLED: String(metrics),
    LOG_LEVEL: "warn",
  };
  delete env.API_DEPRECATIONS;
  const child = spawn(process.execPath, [join(process.cwd(), "services", "gateway", "dist", "main.js")], {
    env,
    stdio: ["ignore", "ignore", "inherit"],
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      if ((await fetch(`${baseUrl}/readyz`)).status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`gateway ${name} did not get ready`);
    await new Promise((r) => setTimeout(r, 200));
  }
  gateways.push({
    name,
    pid: child.pid!,
    baseUrl,
    metricsUrl: metrics ? `http://127.0.0.1:${metricsPort}/metrics` : undefined,
    child,
  });
}

beforeAll(async () => {
  stack = await startLocalStack({
    portBase: knobs.portBase,
    env: { ...NO_RATE_LIMITS, ACCESS_TOKEN_TTL_SECONDS: "3600", SERVICE_REPLICAS: "1" },
  });
  load = new LoadGenerator();
  partner = await connectedPartner(stack, "Bench Metrics Partner");
  await startGateway("metrics on", true);
  await startGateway("metrics off", false);
}, 600_000);

afterAll(async () => {
  load?.close();
  for (const g of gateways) g.child.kill("SIGTERM");
  await stack?.stop();
}, 90_000);

it("the gateway's CPU per request, metrics on and off (GET /v1/files/{id})", async () => {
  const res = await sendFile(
    stack.baseUrl,
    partner.token,
    partner.elder,
    Buffer.from("Bench note: take with water.\n"),
    { filename: "note.txt" },
  );
  if (res.status !== 202) throw new Error(`upload failed: ${res.status}`);
  const id = res.json!.id as string;
  await waitForStatus(stack.baseUrl, partner.token, id, ["processed"]);
  const headers = { authorization: `Bearer ${partner.token}` };

  const run = async (g: (typeof gateways)[number], seconds: number) => {
    // A scrape every second while metrics are on, as the e2e test's Prometheus does (a cluster's: 30 s).
    const scraper = g.metricsUrl
      ? setInterval(
          () =>
            void fetch(g.metricsUrl!)
              .then((r) => r.text())
              .catch(() => undefined),
          1000,
        )
      : undefined;
    const meter = cpuMeter([{ pid: g.pid, name: g.name }]);
    const r = await load.autocannon({
      method: "GET",
      headers,
      url: `${g.baseUrl}/v1/files/${id}`,
      connections: knobs.connections,
      duration: seconds,
    });
    const cpu = meter.stop();
    clearInterval(scraper);
    if (r.non2xx + r.errors + r.timeouts > 0)
      throw new Error(`${g.name}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts`);
    return { cpuUs: (cpu.total * 1e6) / r.ok, rps: r.ok / r.seconds, p99: r.latency.p99 };
  };
  const [on, off] = gateways as [(typeof gateways)[number], (typeof gateways)[number]];
  await run(on, knobs.warmupSeconds);
  await run(off, knobs.warmupSeconds);
  const rounds = { on: [] as Awaited<ReturnType<typeof run>>[], off: [] as Awaited<ReturnType<typeof run>>[] };
  for (let r = 0; r < knobs.rounds; r++) {
    const order = r % 2 === 0 ? [on, off] : [off, on];
    for (const g of order) rounds[g === on ? "on" : "off"].push(await run(g, knobs.roundSeconds));
  }
  const cpuOn = median(rounds.on.map((x) => x.cpuUs));
  const cpuOff = median(rounds.off.map((x) => x.cpuUs));
  report("gateway CPU per request, Prometheus metrics on vs off (GET /v1/files/{id}, one gateway process each)", {
    "CPU µs per request, metrics on (median of rounds)": cpuOn,
    "CPU µs per request, metrics off": cpuOff,
    "metrics' cost, µs per request": cpuOn - cpuOff,
    "metrics' cost, share of the request's CPU": (cpuOn - cpuOff) / cpuOff,
    "CPU µs by round, on": rounds.on.map((x) => Math.round(x.cpuUs)).join(" "),
    "CPU µs by round, off": rounds.off.map((x) => Math.round(x.cpuUs)).join(" "),
    "req/s, on / off (medians)": `${Math.round(median(rounds.on.map((x) => x.rps)))} / ${Math.round(median(rounds.off.map((x) => x.rps)))}`,
    "p99 ms, on / off (medians)": `${median(rounds.on.map((x) => x.p99))} / ${median(rounds.off.map((x) => x.p99))}`,
    "rounds x seconds x connections": `${knobs.rounds} x ${knobs.roundSeconds} x ${knobs.connections}`,
  });
}, 600_000);
