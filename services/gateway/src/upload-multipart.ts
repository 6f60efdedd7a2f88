import type { IncomingMessage } from "node:http";
import type { Readable } from "node:stream";
import multer from "@koa/multer";
import multerCore from "multer";
import type { GatewayContext } from "./context.js";
import { PartnerError, partnerErrorFromInternal } from "./errors.js";
import { invalid, MAX_FIELD_BYTES } from "./upload-request.js";

// The multipart body of POST /v1/files, read by multer (busboy underneath): the text fields into
// ctx.request.body as they come, the one file part handed over as a stream the moment it starts.

/** What multer may read of one upload's body. */
export const multipartLimits = (maxFileBytes: number) => ({
  fileSize: maxFileBytes,
  files: 1,
  fields: 2,
  parts: 3,
  fieldSize: MAX_FIELD_BYTES,
  fieldNameSize: 100,
  headerPairs: 100,
});

/** The file part has started, after `fieldsSoFar`: its byte count once taken whole; a rejection fails the body. */
export type TakeFile = (fieldsSoFar: unknown, stream: Readable & { truncated?: boolean }) => Promise<number>;

/** Reads the whole body: resolves once every part is read and the file part taken, rejects with what failed first. */
export function readMultipart(
  ctx: GatewayContext,
  limits: ReturnType<typeof multipartLimits>,
  takeFile: TakeFile,
): Promise<void> {
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

// What busboy and multer say about a body that is not well-formed multipart, or that stopped arriving.
const malformedBody = new Set([
  "Malformed part header",
  "Unexpected end of form",
  "Unexpected end of file",
  "Multipart: Boundary not found",
  "Malformed content type",
  "Missing Content-Type",
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
  if (
    err instanceof Error &&
    err.constructor === Error &&
    (malformedBody.has(err.message) || err.message.startsWith("Unsupported content type"))
  ) {
    return invalid("The body is not well-formed multipart/form-data.");
  }
  return partnerErrorFromInternal(err);
}
