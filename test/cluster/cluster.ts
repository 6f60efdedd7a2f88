import { execFile } from "node:child_process";
import { promisify } from "node:util";

// The installed release that deploy/cluster/test-cluster.sh hands over: its namespace and name, the
// partner API behind the ingress, kubectl and helm.
const run = promisify(execFile);
const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run test/cluster through npm run test:cluster`);
  return value;
};

export const cluster = {
  namespace: env("CLUSTER_NAMESPACE"),
  release: env("CLUSTER_RELEASE"),
  baseUrl: env("CLUSTER_INGRESS"),
  values: env("CLUSTER_VALUES"),
  helm: env("HELM_BIN"),
  kubectl: env("KUBECTL"),
};

export async function kubectl(...args: string[]): Promise<string> {
  const { stdout } = await run(cluster.kubectl, ["-n", cluster.namespace, ...args], { maxBuffer: 32 * 1024 * 1024 });
  return stdout;
}

export async function kubectlJson<T = any>(...args: string[]): Promise<T> {
  return JSON.parse(await kubectl(...args, "-o", "json")) as T;
}

export async function helm(...args: string[]): Promise<string> {
  const { stdout } = await run(cluster.helm, [...args, "-n", cluster.namespace], { maxBuffer: 32 * 1024 * 1024 });
  return stdout;
}

/** Name of an object of the release: pi-auth, pi-auth-mongodb, ... */
export const named = (component: string) => `${cluster.release}-${component}`;

/** The pods of a component (Running, not terminating), by name. */
export async function podsOf(component: string): Promise<string[]> {
  const list = await kubectlJson<{ items: any[] }>(
    "get",
    "pods",
    "-l",
    `app.kubernetes.io/instance=${cluster.release},app.kubernetes.io/component=${component}`,
  );
  return list.items
    .filter((p) => p.status.phase === "Running" && !p.metadata.deletionTimestamp)
    .map((p) => p.metadata.name as string)
    .sort();
}

/** Runs the operator CLI in the ops pod (the operator's service identity), as an operator would. */
export async function ops(...args: string[]): Promise<Record<string, any>> {
  const out = await kubectl(
    "exec",
    `deploy/${named("ops")}`,
    "--",
    "node",
    "services/ops/dist/main.js",
    ...args,
    "--json",
  );
  return JSON.parse(out) as Record<string, any>;
}

/**
 * Partner traffic until stop() is called: a token request and a read of a connection, over and
 * over, with a few requests in flight. Every answer but the expected one (and every network error)
 * is kept as a failure.
 */
export function partnerTraffic(credential: { client_id: string; client_secret: string }, connectionId: string) {
  const failures: string[] = [];
  let requests = 0;
  let stopped = false;
  /** The body of an expected answer; undefined (and a failure kept) for anything else. */
  const once = async (what: string, request: () => Promise<Response>, expected: number) => {
    requests++;
    try {
      const res = await request();
      const body = await res.text();
      if (res.status !== expected) {
        failures.push(`${what}: ${res.status} ${body.slice(0, 200)}`);
        return undefined;
      }
      return body;
    } catch (err) {
      failures.push(`${what}: ${(err as Error).message} ${String((err as { cause?: unknown }).cause ?? "")}`);
      return undefined;
    }
  };
  const worker = async () => {
    while (!stopped) {
      const body = await once(
        "POST /oauth/token",
        () =>
          fetch(`${cluster.baseUrl}/oauth/token`, {
            method: "POST",
            headers: { "content-type": "application/x-www-form-urlencoded" },
            body: new URLSearchParams({ grant_type: "client_credentials", ...credential }),
            signal: AbortSignal.timeout(10_000),
          }),
        200,
      );
      const token = body ? (JSON.parse(body) as { access_token?: string }).access_token : undefined;
      if (!token) continue;
      for (let i = 0; i < 5 && !stopped; i++) {
        await once(
          `GET /v1/connections/${connectionId}`,
          () =>
            fetch(`${cluster.baseUrl}/v1/connections/${connectionId}`, {
              headers: { authorization: `Bearer ${token}` },
              signal: AbortSignal.timeout(10_000),
            }),
          200,
        );
      }
    }
  };
  const workers = [worker(), worker(), worker()];
  return {
    failures,
    count: () => requests,
    async stop() {
      stopped = true;
      await Promise.all(workers);
    },
  };
}

/** A partner with an approved connection, made through the operator CLI and the public API. */
export async function approvedPartner(name: string) {
  const partner = await ops("partner", "create", "--name", name);
  const elder = await ops("elder", "create");
  const tokenRes = await fetch(`${cluster.baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", ...partner.live }),
  });
  const token = ((await tokenRes.json()) as { access_token: string }).access_token;
  const requested = await fetch(`${cluster.baseUrl}/v1/connections`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ elder: elder.address }),
  });
  const { id } = (await requested.json()) as { id: string };
  await ops("connection", "approve", id);
  return {
    credential: partner.live as { client_id: string; client_secret: string },
    connectionId: id,
    elder: elder.address as string,
  };
}
