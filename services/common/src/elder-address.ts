// The exact character rules of an elder address (the spec leaves them to us):
//   <word>.<word>.<word>@<ADDRESS_DOMAIN>
// where each word is 2 to 32 ASCII letters. Letters are compared without case: an address is
// normalised to lower case before it is looked up or stored. At most 255 characters in all.
// Anything else (spaces, digits, other domains, more or fewer words) is a wrong shape: 400.

export const MAX_ADDRESS_LENGTH = 255;
const word = "[a-z]{2,32}";

export type AddressCheck = { ok: true; address: string } | { ok: false; reason: string };

export function checkElderAddress(value: unknown, domain: string): AddressCheck {
  if (typeof value !== "string") return { ok: false, reason: "must be a string" };
  if (value.length > MAX_ADDRESS_LENGTH)
    return { ok: false, reason: `must be at most ${MAX_ADDRESS_LENGTH} characters` };
  const address = value.toLowerCase();
  const [local, host, ...rest] = address.split("@");
  if (
    rest.length > 0 ||
    host !== domain ||
    local === undefined ||
    !new RegExp(`^${word}\\.${word}\\.${word}$`).test(local)
  ) {
    return { ok: false, reason: `must have the shape word.word.word@${domain}` };
  }
  return { ok: true, address };
}

/** The reserved sandbox elder, the only elder a test credential can reach. */
export function sandboxElderAddress(domain: string): string {
  return `sandbox.test.elder@${domain}`;
}
