import { checkElderAddress } from "@pi/common/rules/elder-address";
import { PartnerError } from "./errors.js";

// What a file upload's request may carry besides the file (docs/files.md), as pure rules.

export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** The text fields (`elder`, `purpose`) are capped so a body cannot grow without a file. */
export const MAX_FIELD_BYTES = 64 * 1024;
const FIELDS = new Set(["elder", "purpose"]);

export const invalid = (message: string, param?: string) => new PartnerError("invalid_request", { message, param });

/** The Idempotency-Key header: absent, or 1 to 255 printable ASCII characters, given once. */
export function parseIdempotencyKey(value: string | string[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (Array.isArray(value)) throw invalid("Idempotency-Key must be given once.", "Idempotency-Key");
  if (value.length === 0) throw invalid("Idempotency-Key must not be empty.", "Idempotency-Key");
  if (value.length > MAX_IDEMPOTENCY_KEY_LENGTH)
    throw invalid(`Idempotency-Key must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters.`, "Idempotency-Key");
  if (!/^[\x20-\x7e]+$/.test(value)) throw invalid("Idempotency-Key must be printable ASCII.", "Idempotency-Key");
  return value;
}

/** The body's text fields `elder` and `purpose`, each at most once; `elder` is required once `complete`. */
export function checkFields(fields: unknown, domain: string, complete: boolean): { elder?: string; purpose?: string } {
  const entries = Object.entries((fields ?? {}) as Record<string, unknown>);
  const out: { elder?: string; purpose?: string } = {};
  for (const [name, value] of entries) {
    if (name === "file") throw invalid("file must be a file part (with a filename).", "file");
    if (!FIELDS.has(name)) throw invalid(`Unknown field ${JSON.stringify(name)}.`, name);
    if (typeof value !== "string") throw invalid(`${name} must be given once, as a text field.`, name);
    if (name === "elder") {
      const check = checkElderAddress(value, domain);
      if (!check.ok) throw invalid(`elder ${check.reason}.`, "elder");
      out.elder = check.address;
    } else out.purpose = value;
  }
  if (complete && out.elder === undefined) throw invalid("elder is required.", "elder");
  return out;
}
