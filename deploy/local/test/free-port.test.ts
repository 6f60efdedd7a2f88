import { describe, expect, it } from "@jest/globals";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { claimPort, ephemeralPortRange, freePort, processAlive, releasePort } from "../src/infra.js";

describe("ports for the local stack's processes", () => {
  it("reads the kernel's ephemeral range, and falls back to the IANA range where it cannot", () => {
    expect(ephemeralPortRange(() => "32768\t60999\n")).toEqual([32768, 60999]);
    expect(ephemeralPortRange(() => "garbage")).toEqual([49152, 65535]);
    expect(
      ephemeralPortRange(() => {
        throw new Error("ENOENT");
      }),
    ).toEqual([49152, 65535]);
  });

  it("takes free ports below the ephemeral range, where no listen(0) or outgoing connection of another process lands", async () => {
    const [low] = ephemeralPortRange();
    const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
    for (const port of ports) {
      expect(port).toBeLessThan(low);
      expect(port).toBeGreaterThan(1024);
    }
  });

  it("never hands out a port twice while the process that claimed it lives, and takes over a dead process's claim", async () => {
    const claims = mkdtempSync(join(tmpdir(), "pi-claims-test-"));
    expect(claimPort(20_001, claims)).toBe(true);
    expect(readFileSync(join(claims, "20001"), "utf8")).toBe(String(process.pid));
    // This process's own claim, and a live process's (pid 1).
    expect(claimPort(20_001, claims)).toBe(false);
    writeFileSync(join(claims, "20002"), "1");
    expect(claimPort(20_002, claims)).toBe(false);
    // A pid no process has (above the kernel's pid_max).
    writeFileSync(join(claims, "20003"), String(2 ** 22 + 1));
    expect(claimPort(20_003, claims)).toBe(true);
    expect(readFileSync(join(claims, "20003"), "utf8")).toBe(String(process.pid));

    // A port given back can be claimed again; another live process's claim is not given back.
    releasePort(20_001, claims);
    expect(claimPort(20_001, claims)).toBe(true);
    releasePort(20_002, claims);
    expect(readFileSync(join(claims, "20002"), "utf8")).toBe("1");

    // Many picks before any is bound, as a stack makes them: all distinct.
    const ports = await Promise.all(Array.from({ length: 200 }, () => freePort(claims)));
    expect(new Set(ports).size).toBe(200);
  });

  it("a claim's owner is alive while its process runs; a pid above any kernel's limit never is", () => {
    expect(processAlive(process.pid)).toBe(true);
    expect(processAlive(2 ** 22 + 1)).toBe(false);
  });
});
