import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root, found from this file (deploy/local/{src,dist}/paths.*). */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(env.STATE_DIR || join(repoRoot, ".state"));
}

/** Built infrastructure (the MongoDB-wire server's and Kafka's jars), shared by every stack and test run. */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(env.INFRA_CACHE_DIR || join(stateDir(env), "cache"));
}
