import { describe, expect, it } from "@jest/globals";
import multerCore from "multer";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { ErrorReason, serviceError } from "@pi/common/rpc/errors";
import { PartnerError } from "../src/errors.js";
import { checkFields, parseIdempotencyKey, uploadError } from "../src/upload-request.js";

const DOMAIN = "elders.example";
const ELDER = "apple.banana.cherry@elders.example";

function refusal(fn: () => unknown): { code: string; param?: string } {
  try {
    fn();
  } catch (err) {
    if (err instanceof PartnerError) return { code: err.code, param: err.detail.param };
    throw err;
  }
  throw new Error("expected a PartnerError");
}

describe("Idempotency-Key header", () => {
  it("is optional and kept as sent when it is 1 to 255 printable ASCII characters", () => {
    expect(parseIdempotencyKey(undefined)).toBeUndefined();
    expect(parseIdempotencyKey("a".repeat(255))).toBe("a".repeat(255));
    expect(parseIdempotencyKey("3f1c2a54-8e7b-4c1d-9a0e-2b6f7d8c9e01")).toBe("3f1c2a54-8e7b-4c1d-9a0e-2b6f7d8c9e01");
  });

  it.each([
    ["longer than 255 characters", "a".repeat(256)],
    ["empty", ""],
    ["not ASCII", "cl\u00e9"],
    ["given twice", ["a", "b"]],
  ])("is a 400 when %s", (_name, value) => {
    expect(refusal(() => parseIdempotencyKey(value))).toEqual({ code: "invalid_request", param: "Idempotency-Key" });
  });
});

describe("text fields of the file send request", () => {
  it("takes elder (normalised) and purpose (any string, as sent)", () => {
    expect(
      checkFields({ elder: ELDER.toUpperCase(), purpose: "  Pharmacy fill: 30 tablets \u{1F48A} " }, DOMAIN, true),
    ).toEqual({
      elder: ELDER,
      purpose: "  Pharmacy fill: 30 tablets \u{1F48A} ",
    });
    expect(checkFields({ elder: ELDER, purpose: "" }, DOMAIN, true)).toEqual({ elder: ELDER, purpose: "" });
    expect(checkFields({ elder: ELDER }, DOMAIN, true)).toEqual({ elder: ELDER });
  });

  it("lets elder come after the file: not required until the body is complete", () => {
    expect(checkFields({}, DOMAIN, false)).toEqual({});
    expect(checkFields({ purpose: "care_note" }, DOMAIN, false)).toEqual({ purpose: "care_note" });
    expect(refusal(() => checkFields({}, DOMAIN, true))).toEqual({ code: "invalid_request", param: "elder" });
  });

  it.each([
    ["an unknown field", { elder: ELDER, colour: "blue" }, "colour"],
    ["a malformed elder", { elder: "not-an-address" }, "elder"],
    ["an elder of another domain", { elder: "apple.banana.cherry@example.com" }, "elder"],
    ["an elder given twice", { elder: [ELDER, ELDER] }, "elder"],
    ["a bracketed field name", { elder: { x: ELDER } }, "elder"],
    ["purpose given twice", { elder: ELDER, purpose: ["a", "b"] }, "purpose"],
    ["file sent as a text field", { elder: ELDER, file: "hello" }, "file"],
  ])("refuses %s with a 400 naming the field", (_name, fields, param) => {
    expect(refusal(() => checkFields(fields, DOMAIN, true))).toEqual({ code: "invalid_request", param });
    expect(refusal(() => checkFields(fields, DOMAIN, false))).toEqual({ code: "invalid_request", param });
  });
});

describe("upload failures map to one partner error each", () => {
  const code = (err: unknown) => {
    const e = uploadError(err);
    return { code: e.code, param: e.detail.param };
  };

  it("the size limit is 413 file_too_large on the file", () => {
    expect(code(new multerCore.MulterError("LIMIT_FILE_SIZE", "file"))).toEqual({
      code: "file_too_large",
      param: "file",
    });
  });

  it.each(["LIMIT_FILE_COUNT", "LIMIT_UNEXPECTED_FILE"] as const)(
    "%s (a second file, a file elsewhere) is 400 on file",
    (c) => {
      expect(code(new multerCore.MulterError(c, "other"))).toEqual({ code: "invalid_request", param: "file" });
    },
  );

  it.each([
    "LIMIT_PART_COUNT",
    "LIMIT_FIELD_COUNT",
    "LIMIT_FIELD_VALUE",
    "LIMIT_FIELD_KEY",
    "MISSING_FIELD_NAME",
  ] as const)("%s is 400", (c) => {
    expect(code(new multerCore.MulterError(c)).code).toBe("invalid_request");
  });

  it.each([
    "Malformed part header",
    "Unexpected end of form",
    "Unexpected end of file",
    "Multipart: Boundary not found",
    "Request aborted",
  ])("the parser's %j is 400", (message) => {
    expect(code(new Error(message)).code).toBe("invalid_request");
  });

  it("file-intake's reasons keep their codes; anything unknown stays a 500", () => {
    expect(code(serviceError(ErrorReason.UNSUPPORTED_MEDIA_TYPE, "x", "file"))).toEqual({
      code: "unsupported_media_type",
      param: "file",
    });
    expect(code(serviceError(ErrorReason.NO_ACTIVE_CONNECTION, "x"))).toEqual({
      code: "no_active_connection",
      param: undefined,
    });
    expect(code(serviceError(ErrorReason.IDEMPOTENCY_KEY_REUSE, "x", "Idempotency-Key")).code).toBe(
      "idempotency_key_reuse",
    );
    expect(code(new RpcError("down", Status.UNAVAILABLE)).code).toBe("service_unavailable");
    expect(code(new TypeError("bug")).code).toBe("internal_error");
    expect(code(new Error("something else")).code).toBe("internal_error");
  });
});
