import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { join } from "node:path";
import { startTestStack, type TestStack } from "../support/services.js";

// The system under test, seen only from outside: a base URL and the operator CLI. By default an
// in-process stack on the test infrastructure with the compiled CLI pointed at it; with
// E2E_BASE_URL and E2E_OPS set (deploy/kind/up.sh does), any deployment, e.g. a kind cluster
// behind its ingress with the CLI run through `kubectl exec`.

export interface Target {
  baseUrl: string;
  ops(...args: string[]): Promise<Record<string, unknown>>;
  stop(): Promise<void>;
}

export async function startTarget(): Promise<Target> {
  const external = process.env.E2E_BASE_URL;
  if (external) {
    const [command, ...prefix] = (process.env.E2E_OPS ?? "npm run --silent ops --").split(/\s+/).filter(Boolean);
    return {
      baseUrl: external.replace(/\/$/, ""),
      ops: (...args) => runOps(command!, [...prefix, ...args], process.env),
      stop: async () => {},
    };
  }
  const stack: TestStack = await startTestStack();
  const env = {
    ...process.env,
    AUTH_SERVICE_URL: stack.settings.AUTH_SERVICE_URL,
    CONNECTION_SERVICE_URL: stack.settings.CONNECTION_SERVICE_URL,
    FILE_INTAKE_SERVICE_URL: stack.settings.FILE_INTAKE_SERVICE_URL,
    WEBHOOK_SERVICE_URL: stack.settings.WEBHOOK_SERVICE_URL,
  };
  return {
    baseUrl: stack.baseUrl,
    // Asynchronous: the services answering the CLI run in this very process.
    ops: (...args) => runOps(process.execPath, [join(process.cwd(), "services", "ops", "dist", "main.js"), ...args], env),
    stop: () => stack.stop(),
  };
}

async function runOps(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<Record<string, unknown>> {
  try {
    const { stdout } = await promisify(execFile)(command, [...args, "--json"], { env, encoding: "utf8" });
    return JSON.parse(stdout) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`ops ${args.join(" ")} failed: ${(err as { stderr?: string }).stderr ?? String(err)}`);
  }
}
