import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { createLogger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import { startWarmGateway } from "@pi/gateway";
import { decodeJwt, NO_RATE_LIMITS, withAuthDb } from "../support/auth.js";
import {
  accessToken,
  call,
  type CliRun,
  connectionRequestStatus,
  opsCliEnv,
  opsFor,
  requestToken,
  runOpsCli,
} from "../support/partner-api.js";
import { freePort } from "../support/gateway-process.js";
import { alive, connectedPorts, descendants } from "../support/processes.js";
import { as, sharedTestStack, startTestStack, stopSharedStacks, type TestStack } from "../support/services.js";
import { startTestReceiver, type TestReceiver } from "../support/webhook-receiver.js";

// Operations: `npm start` as an operator runs it, the operator CLI (the compiled
// services/ops/dist/main.js in its own process) for partners, credentials, keys and webhooks, and
// traces across every service. A stock Prometheus scraping npm start is in
// crashes-and-replicas.test.ts, on the npm start that file runs anyway.

afterAll(stopSharedStacks);

describe("local stack", () => {
  // `npm start` as an operator runs it: real processes, its own MongoDB-wire server and Kafka, its own ports.
  const stateDir = mkdtempSync(join(tmpdir(), "pi-stack-"));
  // Only the gateway port is set (a free one): the database, Kafka and every service replica take free ports, and the
  // operator CLI finds the services through the stack's STATE_DIR.
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    STATE_DIR: stateDir,
    INFRA_CACHE_DIR: join(process.cwd(), ".state", "cache"),
    // GATEWAY_PORT: a free one, chosen when the test starts the stack.
    LOG_LEVEL: "info",
  };
  for (const name of [
    "MONGODB_URI",
    "KAFKA_BROKERS",
    "MONGODB_PORT",
    "KAFKA_PORT",
    "KAFKA_CONTROLLER_PORT",
    "SERVICE_REPLICAS",
  ])
    delete env[name];
  for (const s of ["AUTH", "CONNECTION", "FILE_INTAKE", "WEBHOOK"])
    for (const plane of ["SERVICE", "ADMIN"]) {
      delete env[`${s}_${plane}_PORT`];
      delete env[`${s}_${plane}_URL`];
    }
  let baseUrl = "";
  let stack: ChildProcess | undefined;
  // Every process the stack ever had, so a failed test still leaves nothing behind.
  const seen = new Set<number>();
  const remember = () => {
    if (stack?.pid) for (const p of descendants(stack.pid)) seen.add(p);
  };
  // Set at the end of the test body: a failed run keeps its STATE_DIR (the stack's logs) for the post-mortem.
  let passed = false;

  afterAll(async () => {
    remember();
    // A stack still running (the test failed) is stopped as an operator would first, so that its
    // processes write out the log lines they still hold; what outlives that is killed.
    if (stack && stack.exitCode === null && stack.signalCode === null) {
      const exited = new Promise((resolve) => stack!.once("exit", resolve));
      stack.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
    }
    for (const pid of [stack?.pid, ...seen]) if (pid && alive(pid)) process.kill(pid, "SIGKILL");
    if (passed && process.env.KEEP_STACK_STATE !== "1") rmSync(stateDir, { recursive: true, force: true });
    else process.stderr.write(`npm start's STATE_DIR kept: ${stateDir} (logs in ${join(stateDir, "logs")})\n`);
  });

  function npmStart(extraEnv: NodeJS.ProcessEnv = {}): ChildProcess {
    const out = openSync(join(stateDir, "npm-start.log"), "a");
    return spawn("npm", ["start"], { env: { ...env, ...extraEnv }, stdio: ["ignore", out, out] });
  }

  async function waitReady(timeoutMs: number): Promise<number> {
    const started = Date.now();
    while (Date.now() - started < timeoutMs && stack?.exitCode === null) {
      remember();
      try {
        if ((await fetch(`${baseUrl}/readyz`)).status === 200) return Date.now() - started;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    const tail = readFileSync(join(stateDir, "npm-start.log"), "utf8").split("\n").slice(-15).join("\n");
    throw new Error(
      `${stack?.exitCode === null ? "not ready" : "exited"} within ${timeoutMs} ms; logs in ${stateDir}/logs; npm start said:\n${tail}`,
    );
  }

  function ops(...args: string[]) {
    const r = spawnSync("npm", ["run", "--silent", "ops", "--", ...args], { env, encoding: "utf8" });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  /** `replicas`: of every service and of the gateway. */
  async function stopAndCheckNothingLeft(child: ChildProcess, replicas: number): Promise<number> {
    remember();
    const tree = descendants(child.pid!);
    // Below npm: its shell, the supervisor, the MongoDB-wire server, Kafka, the replicas of the gateway and five services.
    expect(tree.length).toBeGreaterThanOrEqual(4 + 6 * replicas);
    const started = Date.now();
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGTERM");
    await exited;
    const deadline = Date.now() + 20_000;
    while (tree.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(tree.filter(alive)).toEqual([]);
    return Date.now() - started;
  }

  describe("npm start (the operator contract's local stack)", () => {
    it("reaches /readyz, serves the operator CLI and the token endpoint, and SIGTERM leaves no process running", async () => {
      const port = await freePort();
      env.GATEWAY_PORT = String(port);
      baseUrl = `http://127.0.0.1:${port}`;
      stack = npmStart();
      await waitReady(240_000);

      const created = ops("partner", "create", "--name", "Acme", "--json");
      expect(created.status).toBe(0);
      const lines = created.stdout.trim().split("\n");
      expect(lines).toHaveLength(1);
      const partner = JSON.parse(lines[0]!) as {
        partner_id: string;
        live: { client_id: string; client_secret: string };
        test: object;
        signing_secret: string;
      };
      expect(Object.keys(partner).sort()).toEqual(["live", "partner_id", "signing_secret", "test"]);
      expect(Object.keys(partner.live).sort()).toEqual(["client_id", "client_secret"]);
      expect(await accessToken(baseUrl, partner.live.client_id, partner.live.client_secret)).toMatch(/^ey/);

      const bad = ops("partner", "suspend", "ptr_doesnotexist", "--json");
      expect(bad.status).not.toBe(0);
      expect(bad.stdout).toBe("");
      expect(bad.stderr.trim().split("\n")).toHaveLength(1);

      // Service identities (docs/security.md, "Internal calls"): a key per workload kept under
      // STATE_DIR, readable by the owner alone; the CLI signs as ops, which every admin RPC admits,
      // and with another workload's key it is refused before it calls anything.
      const identities = join(stateDir, "service-identity.json");
      expect(statSync(identities).mode & 0o777).toBe(0o600);
      const keys = JSON.parse(readFileSync(identities, "utf8")) as Record<string, string>;
      expect(Object.keys(keys).sort()).toEqual([
        "auth",
        "connection",
        "extraction",
        "file-intake",
        "gateway",
        "ops",
        "webhook",
      ]);
      const asGateway = spawnSync("npm", ["run", "--silent", "ops", "--", "info", "--json"], {
        env: { ...env, SERVICE_IDENTITY_KEY: keys.gateway },
        encoding: "utf8",
      });
      expect(asGateway.status).toBe(2);
      expect(asGateway.stderr).toBe("invalid setting SERVICE_IDENTITY_KEY: it is the key of gateway, not of ops\n");

      // Two replicas of every service and of the gateway; a crashed one is restarted by the supervisor,
      // as Kubernetes would restart its pod, while the other serves.
      const replicas = (service: string) =>
        descendants(stack!.pid!).filter((pid) => {
          try {
            return (
              alive(pid) && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(`services/${service}/dist/main.js`)
            );
          } catch {
            return false;
          }
        });
      for (const service of ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"])
        expect(replicas(service)).toHaveLength(2);
      // Every gateway is connected to both auth replicas before one is killed (/readyz needs only one
      // of them; a replica that listened late is reached after the gateway's reconnect backoff).
      const authPorts = (
        JSON.parse(readFileSync(join(stateDir, "stack.json"), "utf8")) as { AUTH_SERVICE_URL: string }
      ).AUTH_SERVICE_URL.split(",").map((url) => Number(new URL(url).port));
      const connectedToBoth = () =>
        replicas("gateway").every((pid) => authPorts.every((port) => connectedPorts(pid).has(port)));
      for (const deadline = Date.now() + 60_000; !connectedToBoth() && Date.now() < deadline; )
        await new Promise((r) => setTimeout(r, 200));
      expect(connectedToBoth()).toBe(true);
      const [killed, other] = replicas("auth");
      process.kill(killed!, "SIGKILL");
      // The other replica serves at once: the call the gateway makes finds the dead replica's
      // connection refused or broken, and goes to the other one (IssueTokens is idempotent). On a
      // loaded machine the other may still be finishing its HTTP/2 handshake with a gateway (the
      // socket connected, the channel not ready yet: 1 run in 4 under two busy cores); that gateway
      // then has no replica for a moment and answers the fast 503 with Retry-After, and the retry it
      // asks for gets the token. Never a hang, never a 500.
      const form = { grant_type: "client_credentials", ...partner.live };
      const killedAt = Date.now();
      let answer = await requestToken(baseUrl, form);
      if (answer.status === 503) {
        // Not a hang: answered well before an internal call's 10 s deadline would have run out.
        expect(Date.now() - killedAt).toBeLessThan(5_000);
        const retryAfter = Number(answer.headers.get("retry-after"));
        expect(retryAfter).toBeGreaterThanOrEqual(1);
        await new Promise((r) => setTimeout(r, retryAfter * 1000));
        answer = await requestToken(baseUrl, form);
      }
      expect(answer.status).toBe(200);
      expect(JSON.parse(answer.text).access_token).toMatch(/^ey/);
      const deadline = Date.now() + 30_000;
      while (replicas("auth").length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(replicas("auth")).toContain(other);
      expect(replicas("auth")).toHaveLength(2);
      await waitReady(30_000);

      const stopMs = await stopAndCheckNothingLeft(stack, 2);
      expect(stopMs).toBeLessThan(20_000);

      // A second start on the same STATE_DIR keeps the data of the first (one process of each is
      // enough to read it back, and half as many processes start).
      stack = npmStart({ SERVICE_REPLICAS: "1" });
      // How fast it gets ready (under 60 s with a warm cache, the operator contract) is the bench's
      // figure (bench/system.bench.ts, summary): here the wait only bounds a hang.
      await waitReady(180_000);
      expect(await accessToken(baseUrl, partner.live.client_id, partner.live.client_secret)).toMatch(/^ey/);
      await stopAndCheckNothingLeft(stack, 1);
      passed = true;
    }, 420_000);
  });
});

describe("auth operator cli", () => {
  // The operator contract's partner and credential commands, run as an operator runs them: the
  // compiled CLI (services/ops/dist/main.js, built by `npm test`) in its own process, against an
  // in-process stack whose internal addresses it gets from the environment.

  let stack: TestStack;
  let second: RunningService;
  let gateways: string[];
  let elder: string;

  beforeAll(async () => {
    stack = await sharedTestStack(NO_RATE_LIMITS);
    second = await startWarmGateway(as(stack.settings, "gateway"), createLogger("gateway-2", stack.settings.LOG_LEVEL));
    gateways = [stack.baseUrl, `http://127.0.0.1:${second.port}`];
    elder = (await opsFor(stack.settings).elderCreate()).address;
  });
  afterAll(async () => {
    await second?.stop();
    await stack?.stop();
  });

  type Run = CliRun;
  const ops = (...args: string[]) => runOpsCli(opsCliEnv(stack.settings), args);

  /** Exactly one JSON object on stdout and nothing else there; nothing on stderr; exit 0. */
  function oneObject(run: Run): Record<string, unknown> {
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
    expect(run.stdout.endsWith("\n")).toBe(true);
    expect(run.stdout.trim().split("\n")).toHaveLength(1);
    const value = JSON.parse(run.stdout) as unknown;
    expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
    return value as Record<string, unknown>;
  }

  /** Non-zero exit, nothing on stdout, one line on stderr. */
  function refused(run: Run): string {
    expect(run.code).not.toBe(0);
    expect(run.stdout).toBe("");
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
    return run.stderr.trim();
  }

  const everyGateway = (token: string) => Promise.all(gateways.map((g) => connectionRequestStatus(g, token, elder)));

  const credentialShape = { client_id: expect.stringMatching(/^cli_/), client_secret: expect.any(String) };

  describe("operator CLI: partner create", () => {
    it("partner create --json prints exactly the operator contract's object, with working credentials", async () => {
      const out = oneObject(await ops("partner", "create", "--name", "CLI Pharmacy", "--json"));
      expect(out).toEqual({
        partner_id: expect.stringMatching(/^ptr_/),
        live: credentialShape,
        test: credentialShape,
        signing_secret: expect.any(String),
      });
      expect(Object.keys(out)).toEqual(["partner_id", "live", "test", "signing_secret"]);
      const live = out.live as { client_id: string; client_secret: string };
      const test = out.test as { client_id: string; client_secret: string };
      expect(Object.keys(live)).toEqual(["client_id", "client_secret"]);
      expect(new Set([live.client_secret, test.client_secret, out.signing_secret]).size).toBe(3);
      const liveToken = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
      const testToken = await accessToken(stack.baseUrl, test.client_id, test.client_secret);
      expect(decodeJwt(liveToken).payload).toMatchObject({
        sub: out.partner_id,
        mode: "live",
        scope: "connections:write files:write",
      });
      expect(decodeJwt(testToken).payload).toMatchObject({ sub: out.partner_id, mode: "test" });
    });

    it("--json may come before the command as well", async () => {
      const out = oneObject(await ops("--json", "partner", "create", "--name", "Early Flag Clinic"));
      expect(out.partner_id).toMatch(/^ptr_/);
    });

    it("--scopes restricts the partner's allowed scopes", async () => {
      const out = oneObject(
        await ops("partner", "create", "--name", "Files Only", "--scopes", "files:write", "--json"),
      );
      const live = out.live as { client_id: string; client_secret: string };
      const res = await requestToken(stack.baseUrl, { grant_type: "client_credentials", ...live });
      expect(JSON.parse(res.text)).toMatchObject({ scope: "files:write" });
      const asked = await requestToken(stack.baseUrl, {
        grant_type: "client_credentials",
        ...live,
        scope: "connections:write",
      });
      expect(JSON.parse(asked.text)).toMatchObject({ error: "invalid_scope" });
      const both = oneObject(
        await ops("partner", "create", "--name", "Both", "--scopes", "connections:write files:write", "--json"),
      );
      const bothLive = both.live as { client_id: string; client_secret: string };
      expect(
        JSON.parse((await requestToken(stack.baseUrl, { grant_type: "client_credentials", ...bothLive })).text),
      ).toMatchObject({
        scope: "connections:write files:write",
      });
    });

    it.each([[["--scopes", "admin"]], [["--scopes", ""]], [["--webhook-url", "not a url"]]])(
      "partner create refuses %j with one line on stderr and nothing on stdout",
      async (extra) => {
        refused(await ops("partner", "create", "--name", "Bad", ...extra, "--json"));
      },
    );

    it("partner create without --name is refused", async () => {
      refused(await ops("partner", "create", "--json"));
    });

    it("without --json it prints readable lines, not JSON", async () => {
      const run = await ops("partner", "create", "--name", "Human Readable");
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/^partner_id: ptr_/m);
      expect(() => JSON.parse(run.stdout)).toThrow();
    });
  });

  describe("operator CLI: credential create and revoke", () => {
    it("credential create --mode test|live prints the contract's object; the credential works and carries its mode", async () => {
      const partner = oneObject(await ops("partner", "create", "--name", "Second Credential Lab", "--json"));
      for (const mode of ["test", "live"]) {
        const out = oneObject(
          await ops("credential", "create", partner.partner_id as string, "--mode", mode, "--json"),
        );
        expect(out).toEqual({ ...credentialShape, mode });
        expect(Object.keys(out)).toEqual(["client_id", "client_secret", "mode"]);
        const token = await accessToken(stack.baseUrl, out.client_id as string, out.client_secret as string);
        expect(decodeJwt(token).payload).toMatchObject({ mode, sub: partner.partner_id });
      }
    });

    it("credential create refuses a bad mode or an unknown partner", async () => {
      const partner = oneObject(await ops("partner", "create", "--name", "Mode Lab", "--json"));
      expect(
        refused(await ops("credential", "create", partner.partner_id as string, "--mode", "staging", "--json")),
      ).toMatch(/live or test/);
      refused(await ops("credential", "create", "ptr_doesnotexist", "--mode", "live", "--json"));
    });

    it("credential revoke: the effect is visible on every gateway by the time the CLI exits", async () => {
      const partner = oneObject(await ops("partner", "create", "--name", "Revoke Via CLI", "--json"));
      const live = partner.live as { client_id: string; client_secret: string };
      const token = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
      expect(await everyGateway(token)).toEqual([202, 202]);
      const out = oneObject(await ops("credential", "revoke", live.client_id, "--json"));
      expect(out).toEqual({ client_id: live.client_id, status: "revoked" });
      expect(await everyGateway(token)).toEqual([401, 401]);
      const again = await requestToken(gateways[1]!, { grant_type: "client_credentials", ...live });
      expect(JSON.parse(again.text)).toMatchObject({ error: "invalid_client" });
    });

    it("credential revoke: a gateway that does not confirm in time is named in a warning on stderr; stdout keeps its one object", async () => {
      const partner = oneObject(await ops("partner", "create", "--name", "Warned Clinic", "--json"));
      const live = partner.live as { client_id: string };
      await withAuthDb(stack.settings, (db) =>
        db
          .collection("gateways")
          .insertOne({ _id: "ghost-gateway", nextOffsets: { "0": 0 }, seenAt: new Date() } as never),
      );
      try {
        const run = await ops("credential", "revoke", live.client_id, "--json");
        expect(run.code).toBe(0);
        expect(JSON.parse(run.stdout)).toEqual({ client_id: live.client_id, status: "revoked" });
        expect(run.stderr).toMatch(/^warning: 1 of 3 gateways had not confirmed the change after \d+ ms/);
      } finally {
        await withAuthDb(stack.settings, (db) =>
          db.collection("gateways").deleteOne({ _id: "ghost-gateway" } as never),
        );
      }
    });

    it("credential revoke of an unknown client is refused", async () => {
      expect(refused(await ops("credential", "revoke", "cli_doesnotexist", "--json"))).toMatch(/cli_doesnotexist/);
    });
  });

  describe("operator CLI: partner suspend and reinstate", () => {
    it("partner suspend / reinstate: visible on every gateway by the time the CLI exits, both ways; a token from before the suspension stays refused", async () => {
      const partner = oneObject(await ops("partner", "create", "--name", "Suspend Via CLI", "--json"));
      const live = partner.live as { client_id: string; client_secret: string };
      const token = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
      const id = partner.partner_id as string;
      expect(oneObject(await ops("partner", "suspend", id, "--json"))).toEqual({ partner_id: id, status: "suspended" });
      expect(await everyGateway(token)).toEqual([401, 401]);
      expect(
        JSON.parse((await requestToken(stack.baseUrl, { grant_type: "client_credentials", ...live })).text),
      ).toMatchObject({ error: "invalid_client" });
      expect(oneObject(await ops("partner", "reinstate", id, "--json"))).toEqual({ partner_id: id, status: "active" });
      expect(await everyGateway(token)).toEqual([401, 401]);
      expect(await everyGateway(await accessToken(stack.baseUrl, live.client_id, live.client_secret))).toEqual([
        202, 202,
      ]);
    });

    it.each(["suspend", "reinstate"])("partner %s of an unknown partner is refused", async (act) => {
      refused(await ops("partner", act, "ptr_doesnotexist", "--json"));
    });

    it("the decoy partner behind guarantee 5 cannot be reinstated or given credentials", async () => {
      refused(await ops("partner", "reinstate", "ptr~decoy", "--json"));
      refused(await ops("credential", "create", "ptr~decoy", "--mode", "live", "--json"));
    });
  });

  describe("operator CLI: keys rotate", () => {
    it("keys rotate --json names the new key and when it starts signing", async () => {
      const out = oneObject(await ops("keys", "rotate", "--json"));
      expect(out).toEqual({ kid: expect.stringMatching(/^key_/), activates_at: expect.any(String), retired_kids: [] });
      expect(Date.parse(out.activates_at as string)).toBeGreaterThan(Date.now());
    });
  });

  // Last: it revokes the key that signed the tokens above.
  describe("operator CLI: keys revoke", () => {
    it("keys revoke KID --json: the key's tokens are refused on every gateway when the CLI exits, and the replacement signs; an unknown key is refused", async () => {
      const partner = oneObject(await ops("partner", "create", "--name", "Key Revoke Via CLI", "--json"));
      const live = partner.live as { client_id: string; client_secret: string };
      const token = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
      const kid = decodeJwt(token).header.kid as string;
      expect(await everyGateway(token)).toEqual([202, 202]);
      const out = oneObject(await ops("keys", "revoke", kid, "--json"));
      expect(out).toEqual({ kid, status: "revoked", replacement_kid: expect.stringMatching(/^key_/) });
      expect(await everyGateway(token)).toEqual([401, 401]);
      const fresh = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
      expect(decodeJwt(fresh).header.kid).toBe(out.replacement_kid);
      expect(await everyGateway(fresh)).toEqual([202, 202]);
      refused(await ops("keys", "revoke", "key_doesnotexist", "--json"));
    });
  });
});

describe("webhook operator cli", () => {
  // The webhook operator commands added beside the contract's, run as an operator runs them: the
  // compiled CLI (built by `npm test`) in its own process, with --json.

  let stack: TestStack;
  beforeAll(async () => {
    stack = await sharedTestStack(NO_RATE_LIMITS);
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
      expect(out).toEqual({
        partner_id: partner.partner_id,
        signing_secret: expect.stringMatching(/^whsec_/),
        previous_expires_at: expect.any(String),
      });
      const ends = Date.parse(out.previous_expires_at as string);
      expect(ends - before).toBeGreaterThanOrEqual(24 * 3600_000 - 5_000);
      expect(ends - before).toBeLessThanOrEqual(24 * 3600_000 + 60_000);
      const short = oneObject(
        await ops("partner", "rotate-signing-secret", partner.partner_id, "--overlap-hours", "0.5"),
      );
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
      expect(oneObject(await ops("webhook", "recover", partner.partner_id, "--since", "2026-01-01T00:00:00Z"))).toEqual(
        { partner_id: partner.partner_id, requeued: 0, event_ids: [] },
      );
    });
  });
});

describe("trace", () => {
  // Every service of the stack runs in this process, so one in-memory exporter sees the spans of
  // all of them, exactly as each would export its own to a collector.
  const exporter = new InMemorySpanExporter();
  let stack: TestStack;
  let receiver: TestReceiver;

  beforeAll(async () => {
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    stack = await startTestStack();
    receiver = await startTestReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stack?.stop();
    trace.disable();
    context.disable();
    propagation.disable();
  });

  const traceOf = (spans: ReadableSpan[], name: string) => spans.find((s) => s.name === name)?.spanContext().traceId;

  describe("OpenTelemetry", () => {
    it("one trace id spans the gateway, the connection service and the webhook delivery of a caregiver approve", async () => {
      const ops = opsFor(stack.settings);
      const partner = await ops.partnerCreate({ name: "Traced Lab", webhookUrl: receiver.url });
      receiver.useSecret(partner.signing_secret);
      const elder = await ops.elderCreate();
      const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const created = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
      expect(created.status).toBe(202);

      await ops.connectionAct("approve", created.json!.id as string);
      await receiver.waitFor((a) => a.length >= 1, 20_000, "connection.approved");
      const spans = exporter.getFinishedSpans();
      const gatewayTrace = traceOf(spans, "POST /v1/connections");
      expect(gatewayTrace).toMatch(/^[0-9a-f]{32}$/);
      expect(traceOf(spans, "pi.connection.v1.ConnectionService/RequestConnection")).toBe(gatewayTrace);
      expect(traceOf(spans, "connection.approved")).toBe(gatewayTrace);
      expect(traceOf(spans, "publish connection.approved")).toBe(gatewayTrace);
      let delivery: ReadableSpan | undefined;
      for (let i = 0; i < 50 && !delivery; i++) {
        delivery = exporter.getFinishedSpans().find((s) => s.name === "webhook delivery");
        if (!delivery) await new Promise((r) => setTimeout(r, 100));
      }
      expect(delivery?.spanContext().traceId).toBe(gatewayTrace);
      expect(delivery?.attributes["http.response.status_code"]).toBe(204); // what the test receiver answers
    });

    it("a token request alone is one trace from the gateway to auth's IssueTokens (a batch of one is part of its request's trace)", async () => {
      const partner = await opsFor(stack.settings).partnerCreate({ name: "Traced Pharmacy" });
      exporter.reset();
      await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const spans = exporter.getFinishedSpans();
      const gatewayTrace = traceOf(spans, "POST /oauth/token");
      expect(gatewayTrace).toMatch(/^[0-9a-f]{32}$/);
      expect(traceOf(spans, "issue tokens")).toBe(gatewayTrace);
      expect(traceOf(spans, "pi.auth.v1.AuthService/IssueTokens")).toBe(gatewayTrace);
    });
  });
});
