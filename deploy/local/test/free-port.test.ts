import { describe, expect, it } from "@jest/globals";
import { ephemeralPortRange, freePort } from "../src/infra.js";

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
});
