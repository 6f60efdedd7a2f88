import { describe, expect, it } from "@jest/globals";
import { Status } from "@pi/common/rpc/errors";
import { ErrorReason, reasonOf } from "@pi/common/rpc/errors";
import { acceptedType } from "@pi/common/rules/media-types";
import { bytesVerdict, claimVerdict, trailerVerdict } from "../src/verdicts.js";

// The verdicts of an upload in file-intake, in their order (docs/files.md, "Order of checks").

const pdf = acceptedType("application/pdf")!;
const reason = (err: unknown) => reasonOf(err)?.reason;
const DOMAIN = "elders.example";
const ELDER = "amber.falcon.river@elders.example";

describe("the verdict on a file's bytes", () => {
  it("size before type before text: a file over the limit is too large whatever it is", () => {
    expect(reason(bytesVerdict({ size: 11, maxBytes: 10, type: null, text: false }))).toBe(ErrorReason.FILE_TOO_LARGE);
    expect(reason(bytesVerdict({ size: 10, maxBytes: 10, type: null, text: true }))).toBe(
      ErrorReason.UNSUPPORTED_MEDIA_TYPE,
    );
    expect(reason(bytesVerdict({ size: 10, maxBytes: 10, type: pdf, text: false }))).toBe(
      ErrorReason.UNSUPPORTED_MEDIA_TYPE,
    );
    expect(bytesVerdict({ size: 10, maxBytes: 10, type: pdf, text: true })).toBeUndefined();
    // Not typed yet (a head cut short by the gateway's refusal): nothing to say about the type.
    expect(bytesVerdict({ size: 10, maxBytes: 10, type: undefined, text: true })).toBeUndefined();
  });
});

describe("the verdict at the trailer", () => {
  const file = (size: number, ends = true) => ({ size, textEnds: () => ends });

  it("an empty file, then text that stops being text at its end, then elder", () => {
    const badElder = { elderAddress: "nope" };
    expect(trailerVerdict(badElder, file(0, false), DOMAIN)).toMatchObject({ refusal: expect.anything() });
    expect(reasonOf((trailerVerdict(badElder, file(0), DOMAIN) as { refusal: unknown }).refusal)).toMatchObject({
      reason: ErrorReason.INVALID_REQUEST,
      param: "file",
    });
    expect(reason((trailerVerdict(badElder, file(5, false), DOMAIN) as { refusal: unknown }).refusal)).toBe(
      ErrorReason.UNSUPPORTED_MEDIA_TYPE,
    );
    expect(reasonOf((trailerVerdict(badElder, file(5), DOMAIN) as { refusal: unknown }).refusal)?.param).toBe("elder");
    expect(trailerVerdict({ elderAddress: ELDER.toUpperCase() }, file(5), DOMAIN)).toEqual({ elder: ELDER });
  });

  it("the gateway's refusal: the file's end is judged only when the file part had ended, and nothing goes on", () => {
    const cut = trailerVerdict({ elderAddress: "", refused: true }, file(0, false), DOMAIN) as { refusal: unknown };
    expect(cut.refusal).toMatchObject({ code: Status.FAILED_PRECONDITION });
    const whole = trailerVerdict({ elderAddress: "", refused: true, fileComplete: true }, file(5, false), DOMAIN);
    expect(reason((whole as { refusal: unknown }).refusal)).toBe(ErrorReason.UNSUPPORTED_MEDIA_TYPE);
    const fine = trailerVerdict({ elderAddress: ELDER, refused: true, fileComplete: true }, file(5), DOMAIN);
    expect((fine as { refusal: unknown }).refusal).toMatchObject({ code: Status.FAILED_PRECONDITION });
  });
});

describe("the verdicts of storage and idempotency, taken at once", () => {
  const ok = <T>(value: T): PromiseSettledResult<T> => ({ status: "fulfilled", value });
  const failed = (reason: unknown): PromiseSettledResult<never> => ({ status: "rejected", reason });

  it("storage first, then the claim: a failure, a replay, a key reused with another payload, else on", () => {
    const down = new Error("store down");
    expect(claimVerdict(failed(down), ok({ kind: "conflict" }))).toEqual({ refusal: down });
    expect(claimVerdict(ok(undefined), failed(down))).toEqual({ refusal: down });
    expect(claimVerdict(ok(undefined), ok({ kind: "replay", fileId: "file_1" }))).toEqual({ replay: "file_1" });
    expect(reason((claimVerdict(ok(undefined), ok({ kind: "conflict" })) as { refusal: unknown }).refusal)).toBe(
      ErrorReason.IDEMPOTENCY_KEY_REUSE,
    );
    expect(claimVerdict(ok(undefined), ok({ kind: "owned" }))).toBeUndefined();
    expect(claimVerdict(ok(undefined), ok(undefined))).toBeUndefined();
  });
});
