import { readFileSync } from "node:fs";
import { getPriority } from "node:os";
import { afterAll, describe, expect, it, jest } from "@jest/globals";
import { CHILD_ENVIRONMENT_ALLOWED } from "../src/child-environment.js";
import { CHILD_NICE_INCREMENT, DEFAULT_EXTRACTION_LIMITS, Extractor } from "../src/extractor.js";

// Least privilege for the extraction child: it starts with an allow-listed environment, so the
// parent's secrets never reach the process that parses untrusted bytes, and at a lower CPU priority
// than its parent. The child is a real one (the built module), and its environment is read from
// /proc, as the kernel gave it.

jest.setTimeout(120_000);

const SECRETS = [
  "SERVICE_IDENTITY_KEY",
  "KAFKA_PASSWORD",
  "DATA_KEYS",
  "CREDENTIAL_PEPPER",
  "MONGODB_URI",
  "MONGODB_PASSWORD",
] as const;

const environOf = (pid: number) =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, "latin1")
      .split("\0")
      .filter((line) => line !== "")
      .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
  );

describe("extraction child environment", () => {
  const saved = Object.fromEntries([...SECRETS, "TZ"].map((name) => [name, process.env[name]]));
  const extractor = new Extractor(DEFAULT_EXTRACTION_LIMITS);
  afterAll(async () => {
    await extractor.close();
    for (const [name, value] of Object.entries(saved))
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
  });

  it("the child gets none of the parent's secrets (SERVICE_IDENTITY_KEY, KAFKA_PASSWORD, DATA_KEYS, CREDENTIAL_PEPPER, the database URI), only the allow-listed variables (and Node's IPC channel)", async () => {
    for (const name of SECRETS) process.env[name] = `secret-of-the-parent-${name}`;
    process.env.TZ = "UTC";
    const res = await extractor.extract("text/plain", Buffer.from("a care note"));
    expect(res).toMatchObject({ ok: true });
    const pid = extractor.childPid;
    expect(pid).toBeDefined();
    const env = environOf(pid!);
    for (const name of SECRETS) expect({ name, value: env[name] }).toEqual({ name, value: undefined });
    expect(Object.values(env).join("\n")).not.toContain("secret-of-the-parent");
    expect(
      Object.keys(env).filter(
        (name) =>
          name !== "NODE_OPTIONS" &&
          !name.startsWith("NODE_CHANNEL_") &&
          !(CHILD_ENVIRONMENT_ALLOWED as readonly string[]).includes(name),
      ),
    ).toEqual([]);
    // What it is allowed is passed on: the time zone, and NODE_OPTIONS emptied.
    expect(env.TZ).toBe("UTC");
    expect(env.NODE_OPTIONS).toBe("");
  });

  it("the child runs CHILD_NICE_INCREMENT nicer than its parent: extraction takes the CPU that serving partners leaves", async () => {
    const res = await extractor.extract("text/plain", Buffer.from("a care note"));
    expect(res).toMatchObject({ ok: true });
    expect(getPriority(extractor.childPid!)).toBe(Math.min(19, getPriority() + CHILD_NICE_INCREMENT));
  });
});
