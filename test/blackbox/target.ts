import { opsCliEnv, runOpsCli } from "../support/partner-api.js";
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
    const command = (process.env.E2E_OPS ?? "npm run --silent ops --").split(/\s+/).filter(Boolean);
    return {
      baseUrl: external.replace(/\/$/, ""),
      ops: (...args) => ops(process.env, args, command),
      stop: async () => {},
    };
  }
  const stack: TestStack = await startTestStack();
  const env = opsCliEnv(stack.settings);
  return {
    baseUrl: stack.baseUrl,
    ops: (...args) => ops(env, args),
    stop: () => stack.stop(),
  };
}

async function ops(env: NodeJS.ProcessEnv, args: string[], command?: string[]): Promise<Record<string, unknown>> {
  const run = await runOpsCli(env, [...args, "--json"], command);
  if (run.code !== 0) throw new Error(`ops ${args.join(" ")} failed: ${run.stderr}`);
  return JSON.parse(run.stdout) as Record<string, unknown>;
}
