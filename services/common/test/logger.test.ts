import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it, jest } from "@jest/globals";
import { flushWhenWritten, LOG_FLUSH_MS } from "../src/runtime/logger.js";

// The stdout logger of every service writes asynchronously (services/common/src/runtime/logger.ts) and
// loses nothing at exit. A child process runs the built logger (npm test builds first) so that its
// stdout is a real pipe this test controls.

const loggerModule = fileURLToPath(new URL("../dist/runtime/logger.js", import.meta.url));
const LINES = 20_000;

const child = `
  const { createLogger } = await import(${JSON.stringify(loggerModule)});
  const logger = createLogger("gateway", "info");
  for (let i = 0; i < ${LINES}; i++) {
    logger.info({ requestId: "req_" + i, method: "GET", path: "/v1/files/file_x", status: 200, ms: 1 }, "request");
  }
  process.stderr.write("logged\\n");
  process.stdin.once("data", () => process.exit(0));
`;

describe("the stdout logger", () => {
  it("never blocks the process on a slow reader, and every line reaches stdout by the exit", async () => {
    const proc = spawn(process.execPath, ["--input-type=module", "-e", child], { stdio: ["pipe", "pipe", "pipe"] });
    // Nothing is read from stdout until the child says it has logged every line: a synchronous
    // logger would block on the full pipe (64 KiB) and never say so.
    proc.stdout.pause();
    const stderr: string[] = [];
    const logged = new Promise<boolean>((resolve) => {
      proc.stderr.on("data", (c: Buffer) => {
        stderr.push(String(c));
        if (stderr.join("").includes("logged")) resolve(true);
      });
      proc.on("exit", () => resolve(false));
      setTimeout(() => resolve(false), 20_000).unref();
    });
    const chunks: Buffer[] = [];
    proc.stdout.on("data", (c: Buffer) => chunks.push(c));
    const exited = new Promise<number | null>((resolve) => proc.on("close", (code) => resolve(code)));
    try {
      expect({ logged: await logged, stderr: stderr.join("") }).toEqual({ logged: true, stderr: "logged\n" });
    } finally {
      proc.stdout.resume();
      proc.stdin.end("exit\n");
    }
    expect(await exited).toBe(0);
    const lines = Buffer.concat(chunks).toString("utf8").split("\n").filter(Boolean);
    expect(lines).toHaveLength(LINES);
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(parsed[0]).toMatchObject({ level: "info", service: "gateway", requestId: "req_0", msg: "request" });
    expect(parsed.at(-1)).toMatchObject({ requestId: `req_${LINES - 1}` });
  });
});

describe("a quiet process's stdout logger", () => {
  it("writes a lone line without waiting for more lines or the exit", async () => {
    const script = `
      const { createLogger } = await import(${JSON.stringify(loggerModule)});
      createLogger("auth", "info").info({ port: 1 }, "started");
      process.stdin.once("data", () => process.exit(0));
    `;
    const proc = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    const line = await new Promise<string | undefined>((resolve) => {
      proc.stdout.on("data", (c: Buffer) => {
        out += String(c);
        if (out.includes("\n")) resolve(out);
      });
      proc.on("exit", () => resolve(undefined));
      setTimeout(() => resolve(undefined), 10_000).unref();
    });
    proc.stdin.end("exit\n");
    await new Promise((resolve) => proc.on("close", resolve));
    expect(line && JSON.parse(line)).toMatchObject({ level: "info", service: "auth", port: 1, msg: "started" });
  });
});

describe("the stdout logger's flush timer", () => {
  const destination = () => {
    const d = {
      written: [] as string[],
      flushes: 0,
      write: (s: string) => {
        d.written.push(s);
        return true;
      },
      flush: () => void d.flushes++,
    };
    return d;
  };

  it("flushes a buffered line within the flush period, once, and never while nothing is written", () => {
    jest.useFakeTimers();
    try {
      const d = flushWhenWritten(destination());
      jest.advanceTimersByTime(60_000);
      expect(d.flushes).toBe(0);
      d.write("a\n");
      d.write("b\n");
      jest.advanceTimersByTime(LOG_FLUSH_MS - 1);
      expect(d.flushes).toBe(0);
      jest.advanceTimersByTime(1);
      expect({ written: d.written, flushes: d.flushes }).toEqual({ written: ["a\n", "b\n"], flushes: 1 });
      jest.advanceTimersByTime(60_000);
      expect(d.flushes).toBe(1);
      d.write("c\n");
      jest.advanceTimersByTime(LOG_FLUSH_MS);
      expect(d.flushes).toBe(2);
    } finally {
      jest.useRealTimers();
    }
  });

  it("keeps quiet when the destination is already destroyed", () => {
    jest.useFakeTimers();
    try {
      const d = flushWhenWritten({
        write: () => true,
        flush: () => {
          throw new Error("SonicBoom destroyed");
        },
      });
      d.write("x\n");
      expect(() => jest.advanceTimersByTime(LOG_FLUSH_MS)).not.toThrow();
    } finally {
      jest.useRealTimers();
    }
  });
});
