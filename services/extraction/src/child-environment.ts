// The child parses untrusted bytes, so it gets no secret or setting of its parent: an allow-list of what Node
// and the parsers read for locale, time zone and temporary files.

export const CHILD_ENVIRONMENT_ALLOWED = ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "NODE_ENV"] as const;

/** The allowed variables of `parent` that are set; NODE_OPTIONS empty, so no option of the parent's reaches the child. */
export function childEnvironment(parent: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { NODE_OPTIONS: "" };
  for (const name of CHILD_ENVIRONMENT_ALLOWED) if (parent[name] !== undefined) env[name] = parent[name];
  return env;
}
