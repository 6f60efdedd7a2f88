import type { IncomingMessage } from "node:http";
import type { Readable } from "node:stream";
import multer from "@koa/multer";
import multerCore from "multer";
import { checkElderAddress } from "@pi/common/rules/elder-address";
import { invalid, PartnerError, partnerErrorFromInternal } from "./errors.js";
import type { GatewayContext } from "./router.js";

// What a file upload's request may carry besides the file (docs/files.md), as pure rules, and its
// multipart body, read by multer (busboy underneath): the text fields into ctx.request.body as they
// come, the one file part handed over as a stream the moment it starts.

export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** The text fields (`elder`, `purpose`) are capped so a body cannot grow without a file. */
export const MAX_FIELD_BYTES = 64 * 1024;
const FIELDS = new Set(["elder", "purpose"]);

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

/** The file part has started, after `fieldsSoFar`: its byte count once taken whole; a rejection fails the body. */
export type TakeFile = (fieldsSoFar: unknown, stream: Readable) => Promise<number>;

/** Reads the whole body: resolves once every part is read and the file part taken, rejects with what failed first. */
export function readMultipart(ctx: GatewayContext, maxFileBytes: number, takeFile: TakeFile): Promise<void> {
  const storage = {
    _handleFile(req: IncomingMessage, file: multer.File, done: (error?: unknown, info?: Partial<multer.File>) => void) {
      const { body } = req as IncomingMessage & { body?: unknown };
      (async () => takeFile(body, (file as multer.File & { stream: Readable }).stream))().then(
        (size) => done(null, { size }),
        done,
      );
    },
    // What was taken of a file part the body then failed after is the submission's to drop (its refusal).
    _removeFile(_req: IncomingMessage, _file: multer.File, done: (error: Error | null) => void) {
      done(null);
    },
  } as multer.StorageEngine;
  const limits = {
    fileSize: maxFileBytes,
    files: 1,
    fields: 2,
    parts: 3,
    fieldSize: MAX_FIELD_BYTES,
    fieldNameSize: 100,
    headerPairs: 100,
  };
  return multer({ storage, limits }).single("file")(ctx, async () => {});
}

const multerMessages: Record<string, { message: string; param?: string }> = {
  LIMIT_FILE_COUNT: { message: "Send exactly one file, in the field file.", param: "file" },
  LIMIT_UNEXPECTED_FILE: { message: "Send exactly one file, in the field file.", param: "file" },
  LIMIT_PART_COUNT: { message: "The body has too many parts; send file, elder and optionally purpose." },
  LIMIT_FIELD_COUNT: { message: "The body has too many fields; send elder and optionally purpose." },
  LIMIT_FIELD_VALUE: { message: `A text field is longer than ${MAX_FIELD_BYTES} bytes.` },
  LIMIT_FIELD_KEY: { message: "A field name is too long." },
  MISSING_FIELD_NAME: { message: "A part has no field name." },
  INVALID_FIELD_NAME: { message: "A field name is malformed." },
};

// What busboy and multer say about a body that is not well-formed multipart, or that stopped arriving
// (busboy's missing or unsupported content type cannot happen: the route took multipart/form-data only).
const malformedBody = new Set([
  "Malformed part header",
  "Unexpected end of form",
  "Unexpected end of file",
  "Multipart: Boundary not found",
  "Malformed content type",
  "Request aborted",
  "Request closed",
  "Request error",
]);

/** Maps whatever the upload failed with to the one partner error for it. */
export function uploadError(err: unknown): PartnerError {
  if (err instanceof PartnerError) return err;
  if (err instanceof multerCore.MulterError) {
    if (err.code === "LIMIT_FILE_SIZE") return new PartnerError("file_too_large", { param: "file" });
    const known = multerMessages[err.code];
    return invalid(known?.message ?? "The multipart body is malformed.", known?.param ?? err.field);
  }
  if (err instanceof Error && err.constructor === Error && malformedBody.has(err.message))
    return invalid("The body is not well-formed multipart/form-data.");
  return partnerErrorFromInternal(err);
}
