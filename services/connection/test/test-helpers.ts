import { randomBytes } from "node:crypto";

// What the connection store's integration tests share: a clock the test moves, and addresses that
// resolve to no elder.

export function movableClock(start = new Date("2030-01-01T00:00:00Z")) {
  let now = start;
  return {
    now: () => now,
    set: (at: Date) => {
      now = at;
    },
    tick: (seconds: number) => {
      now = new Date(now.getTime() + seconds * 1000);
    },
  };
}

const word = () =>
  Array.from(randomBytes(6))
    .map((b) => String.fromCharCode(97 + (b % 26)))
    .join("");

/** A well-formed address in `domain` that no elder has. */
export const unresolvableAddress = (domain: string) => `${word()}.${word()}.${word()}@${domain}`;
