import { describe, expect, it } from "@jest/globals";
import { readFileSync } from "node:fs";
import { cluster, kubectl, kubectlJson, named, podsOf } from "./cluster.js";

// The chart's metrics ports on a live release (docs/operations.md, "Scraping"): every pod of every
// service declares a port named metrics (METRICS_PORT) that its ClusterIP Service publishes, and,
// once the processes serve it (METRICS_PORT among the settings of services/common/src/runtime/settings.ts),
// each answers /metrics in Prometheus's text format, read here as a scraper would through the API
// server's pod proxy (the release's NetworkPolicies admit only networkPolicy.metricsScraper, which
// this cluster's bridge CNI does not enforce: test/cluster/network-policies.test.ts judges them).
const COMPONENTS = ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"];
/** Workers have no Service (a PodMonitor scrapes them). */
const WORKERS = ["extraction"];
const processesServeMetrics = /^ {2}METRICS_PORT:/m.test(
  readFileSync("services/common/src/runtime/settings.ts", "utf8"),
);

const metricsPortOf = async (pod: string): Promise<number> => {
  const spec = await kubectlJson<{ spec: { containers: { ports?: { name: string; containerPort: number }[] }[] } }>(
    "get",
    "pod",
    pod,
  );
  const port = spec.spec.containers.flatMap((c) => c.ports ?? []).find((p) => p.name === "metrics");
  if (!port) throw new Error(`pod ${pod} declares no port named metrics`);
  return port.containerPort;
};
const scrape = async (pod: string) =>
  kubectl(
    "get",
    "--raw",
    `/api/v1/namespaces/${cluster.namespace}/pods/${pod}:${await metricsPortOf(pod)}/proxy/metrics`,
  );
/** Metric families of an exposition (the names of its # TYPE lines). */
const families = (text: string) =>
  new Set([...text.matchAll(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) /gm)].map((m) => m[1]!));

describe("the metrics ports", () => {
  it("every service's pods declare a port named metrics, published by its ClusterIP Service only (not the headless one; a worker has no Service)", async () => {
    for (const component of COMPONENTS) {
      const pods = await podsOf(component);
      expect([component, pods.length > 0]).toEqual([component, true]);
      for (const pod of pods) expect([pod, await metricsPortOf(pod)]).toEqual([pod, 9464]);
      if (WORKERS.includes(component)) continue;
      const svc = await kubectlJson<{ spec: { ports: { name: string; port: number }[] } }>(
        "get",
        "service",
        named(component),
      );
      expect(svc.spec.ports.find((p) => p.name === "metrics")?.port).toBe(9464);
      if (component !== "gateway") {
        const headless = await kubectlJson<{ spec: { ports: { name: string }[] } }>(
          "get",
          "service",
          `${named(component)}-headless`,
        );
        expect(headless.spec.ports.map((p) => p.name)).not.toContain("metrics");
      }
    }
  });

  (processesServeMetrics ? it : it.skip)(
    "every pod of every service answers /metrics in Prometheus's text format; the gateway's request and auth's call histograms move with a token request",
    async () => {
      // One token request through the HTTPRoute: the gateway times it, auth serves its call.
      const res = await fetch(`${cluster.baseUrl}/oauth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "grant_type=client_credentials&client_id=pi_cluster_metrics&client_secret=not-a-secret",
      });
      expect([400, 401]).toContain(res.status);
      const seen: Record<string, Set<string>> = {};
      for (const component of COMPONENTS) {
        for (const pod of await podsOf(component)) {
          const text = await scrape(pod);
          const names = families(text);
          expect([pod, names.size > 0]).toEqual([pod, true]);
          seen[component] = new Set([...(seen[component] ?? []), ...names]);
        }
      }
      expect(seen.gateway).toContain("http_server_request_duration_seconds");
      expect(seen.gateway).toContain("rpc_client_call_duration_seconds");
      expect(seen.auth).toContain("rpc_server_call_duration_seconds");
      // Counted where the refusal is decided (auth, or the gateway's batcher).
      expect([...seen.gateway!, ...seen.auth!]).toContain("pi_tokens_refused_total");
    },
  );
});
