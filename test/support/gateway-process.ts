import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Settings } from "@pi/common/runtime/settings";
import { freePort } from "../../deploy/local/src/infra.js";
import { as } from "./services.js";

// A gateway in a process of its own (the compiled services/gateway/dist/main.js, as `npm start`
// runs it) in front of an in-process stack's services, so that its memory can be measured alone.

export { freePort };

/** Resident set size of a process now and at its peak (VmRSS, VmHWM), in MiB. */
export function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
  return { rss: kib("VmRSS") / 1024, peak: kib("VmHWM") / 1024 };
}

export interface GatewayProcess {
  baseUrl: string;
  pid: number;
  stop(): Promise<void>;
}

export async function startGatewayProcess(settings: Settings): Promise<GatewayProcess> {
  const port = await freePort();
  const env: Record<string, string> = { ...process.env } as Record<string, string>;
  for (const [key, value] of Object.entries(as(settings, "gateway")))
    if (value !== undefined) env[key] = typeof value === "object" ? JSON.stringify(value) : String(value);
  env.GATEWAY_PORT = String(port);
  const gateway: ChildProcess = spawn(
    process.execPath,
    [join(process.cwd(), "services", "gateway", "dist", "main.js")],
    { env, stdio: ["ignore", "ignore", "inherit"] },
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (gateway.exitCode !== null) return;
    const exited = new Promise((r) => gateway.once("exit", r));
    gateway.kill("SIGTERM");
    await exited;
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      if ((await fetch(`${baseUrl}/readyz`)).status === 200) return { baseUrl, pid: gateway.pid!, stop };
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline || gateway.exitCode !== null) {
      await stop();
      throw new Error("the gateway process did not get ready");
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
