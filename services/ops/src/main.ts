import { Command, CommanderError } from "commander";
import { clientsFor } from "@pi/common/rpc/clients";
import { readFileSync } from "node:fs";
import { loadSettings } from "@pi/common/runtime/settings";
import { commands, describeFailure, UsageError } from "./commands.js";

// The operator CLI: `npm run --silent ops -- <command> [options]`. With --json it prints exactly
// one JSON object on stdout; failures print one line on stderr and exit non-zero.

// `npm run ops` (deploy/local/src/ops.ts) fills in what the running `npm start` recorded in its STATE_DIR.
const settings = loadSettings("ops");
const clients = clientsFor(settings);
const ops = commands(
  { auth: clients.authAdmin(), connection: clients.connectionAdmin(), webhook: clients.webhookAdmin() },
  (line) => process.stderr.write(`${line}\n`),
);
const urls = [settings.AUTH_ADMIN_URL, settings.CONNECTION_ADMIN_URL, settings.WEBHOOK_ADMIN_URL];

function readJwksFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new UsageError(
      `cannot read --jwks-file ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
}

/** Without --json, one `key: value` line a field, nested objects indented. */
const lines = (obj: Record<string, unknown>, indent = ""): string[] =>
  Object.entries(obj).flatMap(([k, v]) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? [`${indent}${k}:`, ...lines(v as Record<string, unknown>, `${indent}  `)]
      : [`${indent}${k}: ${Array.isArray(v) ? JSON.stringify(v) : String(v)}`],
  );

const program = new Command("ops")
  .description("Operator commands for the partner integration stack")
  .option("--json", "print exactly one JSON object on stdout")
  .exitOverride()
  .configureOutput({ writeErr: (s) => process.stderr.write(s) })
  .showHelpAfterError(false);

function action<A extends unknown[]>(run: (...args: A) => Promise<Record<string, unknown>>) {
  return async (...args: A) => {
    const result = await run(...args);
    process.stdout.write(`${program.opts().json ? JSON.stringify(result) : lines(result).join("\n")}\n`);
  };
}

program
  .command("info")
  .description("address domain and sandbox elder address")
  .action(action(() => ops.info()));

const partner = program.command("partner").description("partner accounts");
partner
  .command("create")
  .requiredOption("--name <name>", "partner name")
  .option("--webhook-url <url>", "where webhook events are delivered")
  .option("--scopes <scopes>", 'allowed scopes, space-separated (default "connections:write files:write")')
  .action(action((o: { name: string; webhookUrl?: string; scopes?: string }) => ops.partnerCreate(o)));
partner.command("suspend <partnerId>").action(action((id: string) => ops.partnerSetStatus(id, "suspended")));
partner.command("reinstate <partnerId>").action(action((id: string) => ops.partnerSetStatus(id, "active")));
partner
  .command("set-webhook <partnerId>")
  .requiredOption("--url <url>", "the new webhook address")
  .action(action((id: string, o: { url: string }) => ops.partnerSetWebhook(id, o.url)));

partner
  .command("rotate-signing-secret <partnerId>")
  .description("a new webhook signing secret, shown once; the old one keeps signing beside it during the overlap")
  .option("--overlap-hours <hours>", "how long the old secret keeps signing (default 24)")
  .action(action((id: string, o: { overlapHours?: string }) => ops.partnerRotateSigningSecret(id, o.overlapHours)));

const credential = program.command("credential").description("client credentials");
credential
  .command("create <partnerId>")
  .description(
    "a client secret (shown once), or with --jwks-file / --jwks-url a private_key_jwt credential checked against the partner's public keys",
  )
  .requiredOption("--mode <mode>", "live or test")
  .option("--jwks-file <path>", "the partner's public JWK Set, as a JSON file")
  .option("--jwks-url <url>", "where the partner publishes its public JWK Set (https)")
  .action(
    action((id: string, o: { mode: string; jwksFile?: string; jwksUrl?: string }) =>
      ops.credentialCreate(id, o.mode, {
        ...(o.jwksFile !== undefined ? { jwksJson: readJwksFile(o.jwksFile) } : {}),
        ...(o.jwksUrl !== undefined ? { jwksUrl: o.jwksUrl } : {}),
      }),
    ),
  );
credential.command("revoke <clientId>").action(action((id: string) => ops.credentialRevoke(id)));

const keys = program.command("keys").description("JWT signing keys");
keys
  .command("rotate")
  .description("add a signing key; it starts signing once every replica has it (docs/authentication.md)")
  .action(action(() => ops.keysRotate()));
keys
  .command("revoke <kid>")
  .description(
    "emergency revocation of a signing key: its tokens are refused on every gateway at once; a new key signs if it was signing",
  )
  .action(action((kid: string) => ops.keysRevoke(kid)));

program
  .command("elder")
  .description("elders")
  .command("create")
  .option("--address <address>", "a three-word address (random when absent)")
  .action(action((o: { address?: string }) => ops.elderCreate(o.address)));

const connection = program.command("connection").description("the primary caregiver's acts in the app");
for (const act of ["approve", "decline", "sever"] as const) {
  connection.command(`${act} <connectionId>`).action(action((id: string) => ops.connectionAct(act, id)));
}

const webhook = program.command("webhook").description("webhook deliveries");
webhook.command("deliveries <partnerId>").action(action((id: string) => ops.webhookDeliveries(id)));
webhook
  .command("attempts <eventId>")
  .description("every attempt of one event: time, status, duration, error, start of the answer")
  .action(action((id: string) => ops.webhookAttempts(id)));
webhook
  .command("resend <eventId>")
  .description("send a stored event again: same id and body, fresh signature")
  .action(action((id: string) => ops.webhookResend(id)));
webhook
  .command("recover <partnerId>")
  .description("re-queue every delivery of the partner that failed since a time")
  .requiredOption("--since <isoTime>", "ISO 8601 date-time, e.g. 2026-01-31T12:00:00Z")
  .action(action((id: string, o: { since: string }) => ops.webhookRecover(id, o.since)));

program
  .command("audit")
  .description("the audit trail, newest first: who changed what, when, and whether it was refused")
  .option("--since <isoTime>", "only records at or after this ISO 8601 date-time, e.g. 2026-01-31T12:00:00Z")
  .option("--target <id>", "only records naming this id (con_, ptr_, cli_, eld_, evt_ or key_)")
  .option("--limit <n>", "at most this many records, 1 to 1000 (default 100)")
  .action(action((o: { since?: string; target?: string; limit?: string }) => ops.audit(o)));

program.parseAsync(process.argv).then(
  () => process.exit(0),
  (err) => {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0) process.exit(0);
      process.exit(2); // commander already printed the one-line reason
    }
    const line = describeFailure(err, urls)
      .replace(/\s*\n\s*/g, " ")
      .trim();
    process.stderr.write(`${line}\n`);
    process.exit(1);
  },
);
