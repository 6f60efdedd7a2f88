// An elder address is <word>.<word>.<word>@<ADDRESS_DOMAIN>, each word 2 to 32 ASCII letters, at most
// 255 characters, compared without case (stored and looked up in lower case). Anything else is a 400.

const MAX_ADDRESS_LENGTH = 255;
const LOCAL_PART = /^[a-z]{2,32}\.[a-z]{2,32}\.[a-z]{2,32}$/;

export function checkElderAddress(
  value: unknown,
  domain: string,
): { ok: true; address: string } | { ok: false; reason: string } {
  if (typeof value !== "string") return { ok: false, reason: "must be a string" };
  if (value.length > MAX_ADDRESS_LENGTH)
    return { ok: false, reason: `must be at most ${MAX_ADDRESS_LENGTH} characters` };
  const address = value.toLowerCase();
  const [local, host, ...rest] = address.split("@");
  if (rest.length > 0 || host !== domain || !LOCAL_PART.test(local ?? ""))
    return { ok: false, reason: `must have the shape word.word.word@${domain}` };
  return { ok: true, address };
}

/** The reserved sandbox elder, the only elder a test credential can reach. */
export function sandboxElderAddress(domain: string): string {
  return `sandbox.test.elder@${domain}`;
}
