export const RING1_SCOPES = ["connections:write", "files:write"] as const;
export type Scope = (typeof RING1_SCOPES)[number];

export function isScope(value: string): value is Scope {
  return (RING1_SCOPES as readonly string[]).includes(value);
}

export type ScopeGrant = { ok: true; scopes: string[] } | { ok: false };

/**
 * RFC 6749 section 3.3: the requested space-separated scopes must all be allowed; none requested
 * means every allowed Ring 1 scope. Granted scopes come back in a stable order, without repeats.
 */
export function grantScopes(requested: string | undefined, allowed: readonly string[]): ScopeGrant {
  const allowedRing1 = RING1_SCOPES.filter((s) => allowed.includes(s));
  if (requested === undefined || requested.trim() === "") return { ok: true, scopes: allowedRing1 };
  const asked = new Set(requested.split(" ").filter((s) => s !== ""));
  for (const s of asked) if (!allowedRing1.includes(s as Scope)) return { ok: false };
  return { ok: true, scopes: allowedRing1.filter((s) => asked.has(s)) };
}
