// Partners' own tools against the running stack (npm start): standard OAuth client libraries of
// three ecosystems, each in its default mode and in body mode, each token used on /v1; a key-pair
// credential (private_key_jwt) used by Authlib on the token endpoint it discovered; webhook
// deliveries verified with Stripe's official verifiers (Python and Node) before, during and after a
// signing-secret rotation, and after an operator's resend. Called by deploy/checks/partner-tools.sh,
// which provides the tools; prints one JSON object of results on stdout.
//
// Environment: GATEWAY_URL, PT_PYTHON (venv python), PT_GO_BIN (built Go client), PT_NODE_DIR
// (installed Node tools), and the *_SERVICE_URL settings for the operator CLI. Against a cluster
// (partner-tools.sh with PARTNER_TOOLS_GATEWAY): PT_OPS, the command that runs the operator CLI there
// (kubectl exec -i into the ops pod; a JWK Set goes through its stdin), PT_RESOLVE (name=address of
// the ingress, for the Go client's -resolve; Node and Python read it through their preloaded
// resolvers), and PT_WEBHOOK_RECEIVER (how the cluster reaches this process's webhook receiver:
// host=...,address=...,cert=...,key=..., an HTTPS listener).
import { execFile } from "node:child_process";
import { generateKeyPairSync, randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const gateway = process.env.GATEWAY_URL;
const tokenUrl = `${gateway}/oauth/token`;
const cases = [];

function run(command, args, input) {
  return new Promise((resolve) => {
    const child = execFile(command, args, { cwd: root, timeout: 60_000, maxBuffer: 4 << 20 }, (err, stdout, stderr) =>
      resolve({
        code: err ? (typeof err.code === "number" ? err.code : 1) : 0,
        stdout: stdout.trim(),
        stderr: stderr.trim(),
      }),
    );
    // No input: stdin ends at once (kubectl exec -i would otherwise wait on it).
    child.stdin.end(input);
  });
}

const opsCommand = process.env.PT_OPS
  ? process.env.PT_OPS.split(" ").filter(Boolean)
  : [process.execPath, join(root, "deploy", "local", "dist", "ops.js")];
const remoteOps = Boolean(process.env.PT_OPS);

async function ops(...args) {
  return opsWithInput(undefined, ...args);
}

async function opsWithInput(input, ...args) {
  const res = await run(opsCommand[0], [...opsCommand.slice(1), ...args, "--json"], input);
  if (res.code !== 0) throw new Error(`ops ${args.join(" ")}: ${res.stderr}`);
  return JSON.parse(res.stdout);
}

function record(name, ok, detail = "") {
  cases.push({ name, ok, ...(ok ? {} : { detail }) });
  process.stderr.write(
    `${JSON.stringify({ level: ok ? "info" : "error", service: "partner-tools", case: name, ok, ...(detail ? { detail } : {}) })}\n`,
  );
}

// ---- OAuth client libraries ----
const clients = [
  [
    "python requests-oauthlib, default (HTTP Basic)",
    process.env.PT_PYTHON,
    [join(here, "python", "oauth_client.py"), "requests-oauthlib", "default"],
  ],
  [
    "python requests-oauthlib, body",
    process.env.PT_PYTHON,
    [join(here, "python", "oauth_client.py"), "requests-oauthlib", "body"],
  ],
  [
    "python authlib, default (client_secret_basic)",
    process.env.PT_PYTHON,
    [join(here, "python", "oauth_client.py"), "authlib", "default"],
  ],
  [
    "python authlib, body (client_secret_post)",
    process.env.PT_PYTHON,
    [join(here, "python", "oauth_client.py"), "authlib", "body"],
  ],
  [
    "go golang.org/x/oauth2 clientcredentials, default (auto-detect, Basic first)",
    process.env.PT_GO_BIN,
    ["-style", "auto"],
  ],
  ["go golang.org/x/oauth2 clientcredentials, body (AuthStyleInParams)", process.env.PT_GO_BIN, ["-style", "params"]],
  ["node simple-oauth2, default (header)", process.execPath, [join(process.env.PT_NODE_DIR, "token.cjs"), "default"]],
  ["node simple-oauth2, body", process.execPath, [join(process.env.PT_NODE_DIR, "token.cjs"), "body"]],
];

async function useOnV1(token, elder) {
  const res = await fetch(`${gateway}/v1/connections`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ elder }),
  });
  const body = await res.json();
  return res.status === 202 && /^con_/.test(body.id)
    ? undefined
    : `POST /v1/connections answered ${res.status} ${JSON.stringify(body)}`;
}

async function oauthCases() {
  const partner = await ops("partner", "create", "--name", "Partner Tools OAuth Pharmacy");
  const { address } = await ops("elder", "create");
  for (const [name, command, args] of clients) {
    const isGo = command === process.env.PT_GO_BIN;
    const credentials = isGo
      ? [
          "-token-url",
          tokenUrl,
          "-client-id",
          partner.live.client_id,
          "-client-secret",
          partner.live.client_secret,
          ...(process.env.PT_RESOLVE ? ["-resolve", process.env.PT_RESOLVE] : []),
        ]
      : [tokenUrl, partner.live.client_id, partner.live.client_secret];
    const res = await run(command, [...args, ...credentials]);
    if (res.code !== 0 || !/^[\w-]+\.[\w-]+\.[\w-]+$/.test(res.stdout)) {
      record(`${name}: token`, false, `exit ${res.code}: ${res.stderr.slice(-500)}`);
      continue;
    }
    const problem = await useOnV1(res.stdout, address);
    record(`${name}: token works on /v1`, !problem, problem);
  }
}

// ---- private_key_jwt (SMART Backend Services) and discovery ----
async function privateKeyJwtCases() {
  const dir = mkdtempSync(join(tmpdir(), "pi-partner-keys-"));
  try {
    const partner = await ops("partner", "create", "--name", "Partner Tools Key Pair Lab");
    const { address } = await ops("elder", "create");
    const discovered = await run(process.execPath, [join(process.env.PT_NODE_DIR, "discovery.mjs"), gateway]);
    let metadata;
    try {
      metadata = JSON.parse(discovered.stdout);
    } catch {
      metadata = undefined;
    }
    const discoveryOk =
      metadata?.token_endpoint === tokenUrl &&
      metadata.token_endpoint_auth_methods_supported.includes("private_key_jwt");
    record(
      "node oauth4webapi discovery (RFC 8414): the token endpoint and private_key_jwt",
      discoveryOk,
      discoveryOk ? "" : `exit ${discovered.code}: ${discovered.stdout} ${discovered.stderr.slice(-500)}`,
    );
    const keys = [
      ["RS384", generateKeyPairSync("rsa", { modulusLength: 2048 })],
      ["ES384", generateKeyPairSync("ec", { namedCurve: "P-384" })],
    ];
    for (const [alg, pair] of keys) {
      const name = `python authlib PrivateKeyJWT ${alg}, token endpoint discovered from the metadata`;
      const kid = `${alg.toLowerCase()}-${randomUUID().slice(0, 8)}`;
      const jwksFile = join(dir, `${kid}.jwks.json`);
      const keyFile = join(dir, `${kid}.pem`);
      writeFileSync(
        jwksFile,
        JSON.stringify({ keys: [{ ...pair.publicKey.export({ format: "jwk" }), kid, alg, use: "sig" }] }),
      );
      writeFileSync(keyFile, pair.privateKey.export({ format: "pem", type: "pkcs8" }), { mode: 0o600 });
      // The operator CLI in a cluster's ops pod reads the JWK Set from its stdin.
      const credential = remoteOps
        ? await opsWithInput(
            JSON.stringify({ keys: [{ ...pair.publicKey.export({ format: "jwk" }), kid, alg, use: "sig" }] }),
            "credential",
            "create",
            partner.partner_id,
            "--mode",
            "live",
            "--jwks-file",
            "/dev/stdin",
          )
        : await ops("credential", "create", partner.partner_id, "--mode", "live", "--jwks-file", jwksFile);
      const printed =
        JSON.stringify(Object.keys(credential).sort()) === JSON.stringify(["auth_method", "client_id", "mode"]) &&
        credential.auth_method === "private_key_jwt";
      record(
        `operator CLI: credential create --jwks-file (${alg}) prints client_id, mode, auth_method and no secret`,
        printed,
        JSON.stringify(credential),
      );
      const res = await run(process.env.PT_PYTHON, [
        join(here, "python", "private_key_jwt.py"),
        gateway,
        credential.client_id,
        keyFile,
        kid,
        alg,
      ]);
      if (res.code !== 0 || !/^[\w-]+\.[\w-]+\.[\w-]+$/.test(res.stdout)) {
        record(`${name}: token`, false, `exit ${res.code}: ${res.stderr.slice(-500)}`);
        continue;
      }
      const problem = await useOnV1(res.stdout, address);
      record(`${name}: token works on /v1`, !problem, problem);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- Webhooks, verified by the payment provider's official SDKs ----
/**
 * Where deliveries come to: a plain listener on the loopback for npm start, or for a cluster
 * (PT_WEBHOOK_RECEIVER "url=...,listen=ADDRESS:PORT,cert=FILE,key=FILE") an HTTPS listener on an
 * address the cluster's pods reach, under a name of the URL the webhook service resolves and whose
 * certificate it trusts (test-cluster.sh sets both up).
 */
function receiver() {
  const remote = Object.fromEntries(
    (process.env.PT_WEBHOOK_RECEIVER ?? "")
      .split(",")
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );
  const hits = [];
  const waiters = new Set();
  const handler = (req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      hits.push({
        body: Buffer.concat(chunks).toString("utf8"),
        header: String(req.headers["service-signature"] ?? ""),
        at: Date.now(),
      });
      res.writeHead(204).end();
      for (const w of waiters) w();
    });
  };
  const server = remote.url
    ? createHttpsServer({ cert: readFileSync(remote.cert), key: readFileSync(remote.key) }, handler)
    : createServer(handler);
  const [host, port] = remote.url
    ? [
        remote.listen.slice(0, remote.listen.lastIndexOf(":")),
        Number(remote.listen.slice(remote.listen.lastIndexOf(":") + 1)),
      ]
    : ["127.0.0.1", 0];
  return new Promise((resolve) =>
    server.listen(port, host, () =>
      resolve({
        url: remote.url ?? `http://127.0.0.1:${server.address().port}/webhooks`,
        hits,
        async waitFor(predicate, what, timeoutMs = 30_000) {
          const deadline = Date.now() + timeoutMs;
          while (Date.now() < deadline) {
            const hit = hits.find(predicate);
            if (hit) return hit;
            await new Promise((r) => {
              waiters.add(r);
              setTimeout(r, 200);
            });
          }
          throw new Error(`no webhook delivery: ${what}`);
        },
        close: () => server.close(),
      }),
    ),
  );
}

const verifiers = [
  ["python stripe.Webhook.construct_event", process.env.PT_PYTHON, [join(here, "python", "verify.py")]],
  ["node stripe.webhooks.constructEvent", process.execPath, [join(process.env.PT_NODE_DIR, "verify.cjs")]],
];

/** Verifies one delivery with each SDK and each secret; `expect` says which secrets must pass. */
async function verifyWithSdks(label, hit, expectations) {
  const input = expectations.map(([secret]) => ({ body: hit.body, header: hit.header, secret }));
  for (const [sdk, command, args] of verifiers) {
    const res = await run(command, args, JSON.stringify(input));
    let results;
    try {
      results = JSON.parse(res.stdout);
    } catch {
      record(`${sdk}: ${label}`, false, `exit ${res.code}: ${res.stderr.slice(-500)}`);
      continue;
    }
    expectations.forEach(([, should, secretName], i) => {
      const r = results[i];
      const ok = r.ok === should && (!should || r.id === JSON.parse(hit.body).id);
      record(`${sdk}: ${label}, ${secretName} secret ${should ? "verifies" : "is refused"}`, ok, JSON.stringify(r));
    });
  }
}

/** A pending connection of the partner to a fresh elder; approving it later makes one event. */
async function pendingConnection(partner) {
  const token = await fetch(tokenUrl, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      client_id: partner.live.client_id,
      client_secret: partner.live.client_secret,
    }),
  }).then((r) => r.json());
  const { address } = await ops("elder", "create");
  const connection = await fetch(`${gateway}/v1/connections`, {
    method: "POST",
    headers: { authorization: `Bearer ${token.access_token}`, "content-type": "application/json" },
    body: JSON.stringify({ elder: address }),
  }).then((r) => r.json());
  return connection.id;
}

async function approvedEvent(hook, connectionId, what) {
  await ops("connection", "approve", connectionId);
  return hook.waitFor((h) => JSON.parse(h.body).data.connection_id === connectionId, what);
}

async function webhookCases() {
  const hook = await receiver();
  try {
    const partner = await ops("partner", "create", "--name", "Partner Tools Webhook Lab", "--webhook-url", hook.url);
    const oldSecret = partner.signing_secret;

    // The connections exist beforehand, so that only the approval and its delivery fall in the overlap.
    const [first, second, third] = [
      await pendingConnection(partner),
      await pendingConnection(partner),
      await pendingConnection(partner),
    ];
    const before = await approvedEvent(hook, first, "before the rotation");
    await verifyWithSdks("before a rotation", before, [[oldSecret, true, "the"]]);

    const overlapHours = 0.015; // 54 s
    const rotated = await ops(
      "partner",
      "rotate-signing-secret",
      partner.partner_id,
      "--overlap-hours",
      String(overlapHours),
    );
    const newSecret = rotated.signing_secret;
    const overlapEnds = Date.parse(rotated.previous_expires_at);
    const during = await approvedEvent(hook, second, "during the overlap");
    const signedAt = Number(/^t=(\d+)/.exec(during.header)?.[1]) * 1000;
    if (signedAt >= overlapEnds - 1000) {
      record(
        "rotation: a delivery during the overlap",
        false,
        `the delivery came ${(signedAt - overlapEnds) / 1000} s after the overlap ended: too late to test it`,
      );
    } else {
      record(
        "rotation: a delivery during the overlap carries two v1 values",
        during.header.split(",").filter((p) => p.startsWith("v1=")).length === 2,
        during.header.replace(/[0-9a-f]{64}/g, "…"),
      );
      await verifyWithSdks("during the rotation's overlap", during, [
        [oldSecret, true, "the old"],
        [newSecret, true, "the new"],
      ]);
    }

    await new Promise((r) => setTimeout(r, Math.max(0, overlapEnds - Date.now() + 500)));
    const after = await approvedEvent(hook, third, "after the overlap");
    await verifyWithSdks("after the overlap", after, [
      [newSecret, true, "the new"],
      [oldSecret, false, "the old"],
    ]);

    const eventId = JSON.parse(before.body).id;
    const count = hook.hits.length;
    await ops("webhook", "resend", eventId);
    const resent = await hook.waitFor(
      (h) => hook.hits.indexOf(h) >= count && JSON.parse(h.body).id === eventId,
      "the resent event",
    );
    record(
      "resend: same evt_ id and the identical body",
      resent.body === before.body,
      resent.body === before.body ? "" : "body differs",
    );
    await verifyWithSdks("a resent event (after the overlap)", resent, [[newSecret, true, "the new"]]);
  } finally {
    hook.close();
  }
}

try {
  await oauthCases();
} catch (err) {
  record("OAuth client libraries", false, String(err?.stack ?? err));
}
try {
  await privateKeyJwtCases();
} catch (err) {
  record("private_key_jwt with a standard client library", false, String(err?.stack ?? err));
}
try {
  await webhookCases();
} catch (err) {
  record("webhook verification with the official SDKs", false, String(err?.stack ?? err));
}
const passed = cases.filter((c) => c.ok).length;
console.log(JSON.stringify({ passed, failed: cases.length - passed, cases }));
