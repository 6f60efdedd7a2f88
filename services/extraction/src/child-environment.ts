// The environment an extraction child starts with (extractor.ts forks it). The child parses
// untrusted bytes, so it gets no secret of its parent (SERVICE_IDENTITY_KEY, KAFKA_PASSWORD,
// DATA_KEYS, CREDENTIAL_PEPPER, MONGODB_URI and every other setting): only what Node and the
// parsers read for locale, time zone and temporary files. An allow-list, so a setting added later
// stays out unless it is added here.

export const CHILD_ENVIRONMENT_ALLOWED = ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "NODE_ENV"] as const;

/** The allowed variables of `parent` that are set; NODE_OPTIONS empty, so no option of the parent's reaches the child. */
export function childEnvironment(parent: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { NODE_OPTIONS: "" };
  for (const name of CHILD_ENVIRONMENT_ALLOWED) if (parent[name] !== undefined) env[name] = parent[name];
  return env;
}
