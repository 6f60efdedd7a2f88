import { afterAll, describe, expect, it } from "@jest/globals";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger } from "@pi/common/runtime/logger";
import { Supervisor } from "../src/supervisor.js";

// The gateway replicas of `npm start` share the partner port as node:cluster workers of the
// supervisor. Killed outright under traffic, none of them may leave a request hanging: each request
// gets an answer, a reset or a refusal, quickly (issue 23: one hung 35 s after kill -9 of both).

const dir = mkdtempSync(join(tmpdir(), "pi-supervisor-"));
const server = join(dir, "server.mjs");
writeFileSync(
  server,
  `import http from "node:http";\nhttp.createServer((req, res) => res.end(String(process.pid))).listen(Number(process.env.PORT), "127.0.0.1");\n`,
);
const supervisor = new Supervisor(createLogger("supervisor", "silent"));

afterAll(async () => {
  await supervisor.stop([["web-1", "web-2"]], 2_000);
  rmSync(dir, { recursive: true, force: true });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Longer than this without an answer, a reset or a refusal is a hang. */
const HANG_MS = 5_000;

describe("workers sharing a port (the gateways of npm start)", () => {
  it("both killed with SIGKILL under traffic: no request hangs, every one is answered, reset or refused", async () => {
    const port = await freePort();
    for (const name of ["web-1", "web-2"]) {
      await supervisor.start({
        name,
        command: process.execPath,
        args: [server],
        env: { PORT: String(port) },
        logFile: join(dir, `${name}.log`),
        sharesPorts: true,
      });
    }
    const url = `http://127.0.0.1:${port}/`;
    for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
      if (
        await fetch(url).then(
          () => true,
          () => false,
        )
      )
        break;
    }

    const outcomes = { answered: 0, refusedOrReset: 0, hung: 0 };
    let stop = false;
    const client = async () => {
      while (!stop) {
        try {
          const res = await fetch(url, { signal: AbortSignal.timeout(HANG_MS), headers: { connection: "close" } });
          await res.text();
          outcomes.answered++;
        } catch (err) {
          if ((err as Error).name === "TimeoutError") outcomes.hung++;
          else outcomes.refusedOrReset++;
        }
      }
    };
    const clients = Array.from({ length: 16 }, client);
    // Killed once each is serving traffic; the supervisor restarts them after its backoff.
    while (outcomes.answered < 200) await new Promise((r) => setTimeout(r, 20));
    for (const name of ["web-1", "web-2"]) process.kill(supervisor.pid(name)!, "SIGKILL");
    const killedAt = Date.now();
    while (outcomes.refusedOrReset === 0 && Date.now() - killedAt < 10_000) await new Promise((r) => setTimeout(r, 20));
    // Until both are back and answering again.
    const answeredAtKill = outcomes.answered;
    while (outcomes.answered < answeredAtKill + 200 && Date.now() - killedAt < 60_000)
      await new Promise((r) => setTimeout(r, 50));
    stop = true;
    await Promise.all(clients);
    expect(outcomes.hung).toBe(0);
    expect(outcomes.refusedOrReset).toBeGreaterThan(0);
    expect(outcomes.answered).toBeGreaterThanOrEqual(answeredAtKill + 200);
  }, 120_000);
});
