import { opsCliEnv, runOpsCli } from "../support/partner-api.js";
import { startTestStack, type TestStack } from "../support/services.js";

// The system under test, seen only from outside: a base URL, its readiness URL and the operator
// CLI. By default an in-process stack on the test infrastructure with the compiled CLI pointed at
// it; with E2E_BASE_URL and E2E_OPS set, any deployment: `npm start` (http://127.0.0.1:8080), or a
// cluster behind its ingress with the CLI run through `kubectl exec` (deploy/cluster/test-cluster.sh,
// deploy/kind/up.sh). Readiness is E2E_READY_URL, else <base>/readyz: a cluster's ingress does not
// publish /readyz (docs/security.md), so a cluster run names the gateway's own port (a port-forward).

export interface Target {
  baseUrl: string;
  /** GET answers 200 while the deployment is ready. */
  readyUrl: string;
  ops(...args: string[]): Promise<Record<string, unknown>>;
  stop(): Promise<void>;
}

export async function startTarget(): Promise<Target> {
  const external = process.env.E2E_BASE_URL;
  if (external) {
    const command = (process.env.E2E_OPS ?? "npm run --silent ops --").split(/\s+/).filter(Boolean);
    const baseUrl = external.replace(/\/$/, "");
    return {
      baseUrl,
      readyUrl: process.env.E2E_READY_URL || `${baseUrl}/readyz`,
      ops: (...args) => ops(process.env, args, command),
      stop: async () => {},
    };
  }
  const stack: TestStack = await startTestStack();
  const env = opsCliEnv(stack.settings);
  return {
    baseUrl: stack.baseUrl,
    readyUrl: `${stack.baseUrl}/readyz`,
    ops: (...args) => ops(env, args),
    stop: () => stack.stop(),
  };
}

async function ops(env: NodeJS.ProcessEnv, args: string[], command?: string[]): Promise<Record<string, unknown>> {
  const run = await runOpsCli(env, [...args, "--json"], command);
  if (run.code !== 0) throw new Error(`ops ${args.join(" ")} failed: ${run.stderr}`);
  return JSON.parse(run.stdout) as Record<string, unknown>;
}
