import { readFileSync } from "node:fs";
import { join } from "node:path";

// The internal addresses `npm start` chose, recorded under its STATE_DIR for the operator CLI.
export const LOCAL_STACK_FILE = "stack.json";
export const SERVICE_URL_SETTINGS = [
  "AUTH_SERVICE_URL",
  "CONNECTION_SERVICE_URL",
  "FILE_INTAKE_SERVICE_URL",
  "WEBHOOK_SERVICE_URL",
  "AUTH_ADMIN_URL",
  "CONNECTION_ADMIN_URL",
  "WEBHOOK_ADMIN_URL",
] as const;

/** A local stack's JSON file under its STATE_DIR; {} when there is none (or it is unreadable). */
function readStateFile(stateDir: string, name: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(join(stateDir, name), "utf8")) as Record<string, unknown>;
  } catch {
    return {};
  }
}

/** The environment with every unset `*_SERVICE_URL` taken from a running local stack's file, if any. */
export function withLocalStackAddresses(env: NodeJS.ProcessEnv, stateDir: string): NodeJS.ProcessEnv {
  if (SERVICE_URL_SETTINGS.every((name) => env[name])) return env;
  const recorded = readStateFile(stateDir, LOCAL_STACK_FILE);
  const filled = { ...env };
  for (const name of SERVICE_URL_SETTINGS)
    if (!filled[name] && typeof recorded[name] === "string") filled[name] = recorded[name];
  return filled;
}

// `npm start`'s key of every workload, `{"gateway": "<SERVICE_IDENTITY_KEY>", ...}` (mode 0600), under its STATE_DIR.
export const LOCAL_IDENTITY_FILE = "service-identity.json";

/** The environment with SERVICE_IDENTITY_KEY, when unset, taken from a local stack's file, if any. */
export function withLocalStackIdentity(env: NodeJS.ProcessEnv, stateDir: string, name: string): NodeJS.ProcessEnv {
  if (env.SERVICE_IDENTITY_KEY) return env;
  const key = readStateFile(stateDir, LOCAL_IDENTITY_FILE)[name];
  return typeof key === "string" ? { ...env, SERVICE_IDENTITY_KEY: key } : env;
}
