import { beforeAll, describe, expect, it } from "@jest/globals";
import { approvedPartner, cluster, helm, kubectl, kubectlJson, partnerTraffic, podsOf } from "./cluster.js";

// What only a cluster shows: readiness and probes while pods come and go under partner traffic.
let partner: Awaited<ReturnType<typeof approvedPartner>>;
beforeAll(async () => {
  partner = await approvedPartner("Cluster Rollout Pharmacy");
});

// Every Deployment of the release; extraction (a worker, no Service) takes the same config, so it rolls too.
const services = ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"];

describe("under partner traffic", () => {
  it("a helm upgrade that changes a setting rolls every service with no failed request", async () => {
    const before = Object.fromEntries(await Promise.all(services.map(async (s) => [s, await podsOf(s)] as const)));
    const traffic = partnerTraffic(partner.credential, partner.connectionId);
    await new Promise((r) => setTimeout(r, 2000));
    const current = await helm("get", "values", cluster.release, "-o", "json");
    const level =
      (JSON.parse(current) as { config?: { LOG_LEVEL?: string } }).config?.LOG_LEVEL === "debug" ? "info" : "debug";
    await helm(
      "upgrade",
      cluster.release,
      "charts/partner-integration",
      "--reuse-values",
      "--set",
      `config.LOG_LEVEL=${level}`,
      "--wait",
      "--timeout",
      "10m",
    );
    await traffic.stop();
    const after = Object.fromEntries(await Promise.all(services.map(async (s) => [s, await podsOf(s)] as const)));
    for (const s of services) {
      expect(after[s].length).toBeGreaterThan(0);
      expect(after[s].filter((p) => before[s].includes(p))).toEqual([]); // every pod was replaced
    }
    expect(traffic.count()).toBeGreaterThan(50);
    expect(traffic.failures).toEqual([]);
  });

  it("a deleted auth pod and a deleted connection pod lose no request", async () => {
    const traffic = partnerTraffic(partner.credential, partner.connectionId);
    await new Promise((r) => setTimeout(r, 2000));
    const victims = [(await podsOf("auth"))[0], (await podsOf("connection"))[0]];
    await kubectl("delete", "pod", ...victims, "--wait=true");
    for (const s of ["auth", "connection"]) {
      await kubectl("rollout", "status", `deploy/${cluster.release}-${s}`, "--timeout=300s");
    }
    await new Promise((r) => setTimeout(r, 3000));
    await traffic.stop();
    for (const s of ["auth", "connection"]) expect((await podsOf(s)).filter((p) => victims.includes(p))).toEqual([]);
    expect(traffic.count()).toBeGreaterThan(20);
    expect(traffic.failures).toEqual([]);
  });
});

describe("objects a cluster accepts", () => {
  it("PodDisruptionBudgets and HorizontalPodAutoscalers are accepted and bound to their workloads", async () => {
    const pdbs = await kubectlJson<{ items: any[] }>(
      "get",
      "pdb",
      "-l",
      `app.kubernetes.io/instance=${cluster.release}`,
    );
    // values-production.yaml: a PDB for every service, each letting an unready pod be evicted.
    expect(pdbs.items.map((p) => p.metadata.name).sort()).toEqual(
      ["auth", "connection", "extraction", "file-intake", "gateway", "webhook"].map((c) => `${cluster.release}-${c}`),
    );
    for (const pdb of pdbs.items)
      expect([pdb.metadata.name, pdb.spec.unhealthyPodEvictionPolicy]).toEqual([pdb.metadata.name, "AlwaysAllow"]);
    for (const pdb of pdbs.items) expect(pdb.status.expectedPods).toBeGreaterThan(0); // the controller matched its pods
    const hpas = await kubectlJson<{ items: any[] }>(
      "get",
      "hpa",
      "-l",
      `app.kubernetes.io/instance=${cluster.release}`,
    );
    expect(hpas.items.map((h) => h.spec.scaleTargetRef.name).sort()).toEqual(
      ["auth", "extraction", "file-intake", "gateway"].map((c) => `${cluster.release}-${c}`),
    );
    const gateway = await kubectlJson("get", "deploy", `${cluster.release}-gateway`);
    expect(gateway.spec.replicas).toBeGreaterThanOrEqual(
      hpas.items.find((h) => h.spec.scaleTargetRef.name === `${cluster.release}-gateway`).spec.minReplicas,
    );
  });

  it("values-production.yaml's priority classes are admitted and its spread kept by the scheduler: two or more Ready replicas of every service, on the one node", async () => {
    const pods = await kubectlJson<{ items: any[] }>(
      "get",
      "pods",
      "-l",
      `app.kubernetes.io/instance=${cluster.release}`,
    );
    const ready = (p: any) => p.status.conditions?.some((c: any) => c.type === "Ready" && c.status === "True");
    for (const component of ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"]) {
      const mine = pods.items.filter(
        (p) => p.metadata.labels["app.kubernetes.io/component"] === component && !p.metadata.deletionTimestamp,
      );
      expect([component, mine.filter(ready).length >= 2]).toEqual([component, true]);
      expect([
        component,
        mine[0].spec.topologySpreadConstraints.map((c: any) => `${c.topologyKey} ${c.whenUnsatisfiable}`),
      ]).toEqual([component, ["kubernetes.io/hostname ScheduleAnyway", "topology.kubernetes.io/zone ScheduleAnyway"]]);
    }
    const priority = (component: string) =>
      pods.items.find((p) => p.metadata.labels["app.kubernetes.io/component"] === component)!.spec.priority;
    expect(["gateway", "auth-mongodb", "kafka", "extraction"].map((c) => [c, priority(c)])).toEqual([
      ["gateway", 100000],
      ["auth-mongodb", 1000000],
      ["kafka", 1000000],
      ["extraction", 0],
    ]);
  });
});
