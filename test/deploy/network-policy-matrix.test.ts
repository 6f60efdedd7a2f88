// The chart's NetworkPolicies judged without a cluster: `helm template` with the default values,
// one pod per rendered workload (its template's labels and container ports, an address of its own),
// and the NetworkPolicy rules (test/support/network-policy.ts) decide each connection of the
// documented matrix (test/support/policy-matrix.ts). `npm run test:cluster` judges the same matrix
// on the objects of an installed release.
import { beforeAll, describe, expect, it } from "@jest/globals";
import { ensureHelm } from "../../deploy/checks/helm.mjs";
import * as chart from "../../deploy/checks/chart.mjs";
import type { K8sObject } from "../../deploy/checks/chart.mjs";
import { admits, type Namespace, type NetworkPolicy, type Pod } from "../support/network-policy.js";
import { admitted, componentOf, componentPorts, components, refused } from "../support/policy-matrix.js";

let policies: NetworkPolicy[];
let pods: Pod[];
let rendered: ReturnType<typeof chart.helmTemplate>;
const namespaces: Namespace[] = [
  { name: chart.NAMESPACE, labels: { "kubernetes.io/metadata.name": chart.NAMESPACE } },
  { name: "ingress-nginx", labels: { "kubernetes.io/metadata.name": "ingress-nginx" } },
  { name: "elsewhere", labels: { "kubernetes.io/metadata.name": "elsewhere" } },
  { name: "monitoring", labels: { "kubernetes.io/metadata.name": "monitoring" } },
  { name: "kube-system", labels: { "kubernetes.io/metadata.name": "kube-system" } },
];
const podOf = (component: string) => pods.find((p) => p.labels["app.kubernetes.io/component"] === component)!;
const pod = (namespace: string, name: string, labels: Record<string, string>, n: number): Pod => ({
  namespace,
  name,
  labels,
  ip: `10.244.1.${n}`,
  ports: {},
});

beforeAll(() => {
  rendered = chart.helmTemplate(ensureHelm(), {});
  if (rendered.code !== 0) throw new Error(rendered.stderr);
  const docs: K8sObject[] = rendered.docs;
  policies = chart
    .byKind(docs, "NetworkPolicy")
    .map((p: K8sObject) => ({ ...p, metadata: { ...p.metadata, namespace: chart.NAMESPACE } }));
  pods = chart.workloads(docs).map((w: K8sObject, i: number) => ({
    ...pod(chart.NAMESPACE, w.metadata.name, w.spec.template.metadata.labels, i + 10),
    ports: Object.fromEntries(
      w.spec.template.spec.containers.flatMap((c: K8sObject) =>
        (c.ports ?? []).map((p: K8sObject) => [p.name, p.containerPort]),
      ),
    ),
  }));
}, 10 * 60_000);

describe("the chart's NetworkPolicies, judged on the rendered objects", () => {
  for (const source of Object.keys(admitted)) {
    it(`${source} may reach ${admitted[source].join(", ")}, and not ${refused[source].join(", ")}`, () => {
      const judged = Object.fromEntries(
        [...admitted[source], ...refused[source]].map((c) => [
          c,
          admits(policies, namespaces, podOf(source), podOf(componentOf(c)), componentPorts[c]),
        ]),
      );
      expect(judged).toEqual(
        Object.fromEntries([...admitted[source].map((c) => [c, true]), ...refused[source].map((c) => [c, false])]),
      );
    });
  }

  it("admit the ingress controller to the gateway only, and no pod of another namespace or without the release's labels", () => {
    const controller = pod("ingress-nginx", "controller", { "app.kubernetes.io/name": "ingress-nginx" }, 1);
    const foreign = pod("elsewhere", "foreign", { "app.kubernetes.io/name": "ingress-nginx" }, 2);
    const unlabelled = pod(chart.NAMESPACE, "unlabelled", {}, 3);
    const judged = Object.fromEntries(
      components.map((c) => [
        c,
        [controller, foreign, unlabelled].map((from) =>
          admits(policies, namespaces, from, podOf(componentOf(c)), componentPorts[c]),
        ),
      ]),
    );
    expect(judged).toEqual(Object.fromEntries(components.map((c) => [c, [c === "gateway", false, false]])));
  });

  it("admit the scraper (networkPolicy.metricsScraper) to every service's metrics port and nothing else; no other pod to a metrics port", () => {
    const scraper = pod("monitoring", "prometheus-0", { "app.kubernetes.io/name": "prometheus" }, 5);
    const impostor = pod("elsewhere", "prometheus-0", { "app.kubernetes.io/name": "prometheus" }, 6);
    const services = ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"];
    const metricsPort = (c: string) => podOf(c).ports.metrics!;
    expect(services.map((c) => [c, metricsPort(c)])).toEqual(services.map((c) => [c, 9464]));
    const judged = Object.fromEntries(
      services.map((c) => [
        c,
        [
          admits(policies, namespaces, scraper, podOf(c), metricsPort(c)),
          admits(policies, namespaces, impostor, podOf(c), metricsPort(c)),
        ],
      ]),
    );
    expect(judged).toEqual(Object.fromEntries(services.map((c) => [c, [true, false]])));
    // The scraper reaches no data, admin, database or Kafka port.
    expect(
      components.filter((c) => admits(policies, namespaces, scraper, podOf(componentOf(c)), componentPorts[c]!)),
    ).toEqual([]);
    // The release's own pods reach no metrics port of another.
    for (const from of services) {
      expect([
        from,
        services.filter((to) => to !== from && admits(policies, namespaces, podOf(from), podOf(to), metricsPort(to))),
      ]).toEqual([from, []]);
    }
  });

  it("keep the internet egress of the webhook service and auth (partners' JWK Set URLs) off private addresses, and the others' closed", () => {
    const outside = pod("elsewhere", "partner", {}, 4);
    const partner = { ...outside, ip: "203.0.113.7" };
    expect([
      admits(policies, namespaces, podOf("webhook"), partner, 443),
      admits(policies, namespaces, podOf("webhook"), outside, 443),
      admits(policies, namespaces, podOf("auth"), partner, 443),
      admits(policies, namespaces, podOf("auth"), outside, 443),
      admits(policies, namespaces, podOf("connection"), partner, 443),
    ]).toEqual([true, false, true, false, false]);
  });

  it("DNS egress goes only to the cluster's DNS (networkPolicy.dns): every pod of the release that resolves names reaches kube-system's kube-dns pods on 53, and no other address on 53", () => {
    const clusterDns = pod("kube-system", "coredns-0", { "k8s-app": "kube-dns" }, 53);
    const otherSystemPod = pod("kube-system", "metrics-server", { "k8s-app": "metrics-server" }, 54);
    const impostor = pod("elsewhere", "coredns-0", { "k8s-app": "kube-dns" }, 55);
    const publicResolver = { ...pod("elsewhere", "resolver", {}, 56), ip: "8.8.8.8" };
    const release = chart
      .workloads(rendered.docs)
      .map((w: K8sObject) => w.spec.template.metadata.labels["app.kubernetes.io/component"] as string);
    expect(release.length).toBeGreaterThanOrEqual(12);
    const judged = Object.fromEntries(
      release.map((c) => [
        c,
        [clusterDns, otherSystemPod, impostor, publicResolver].flatMap((to) =>
          ["UDP", "TCP"].map((protocol) => admits(policies, namespaces, podOf(c), to, 53, protocol)),
        ),
      ]),
    );
    // The databases resolve nothing: they open no egress at all.
    expect(judged).toEqual(
      Object.fromEntries(
        release.map((c) => [
          c,
          c.endsWith("-mongodb") ? Array(8).fill(false) : [true, true, false, false, false, false, false, false],
        ]),
      ),
    );
  });

  it("DNS egress follows networkPolicy.dns (a node-local cache by its address)", () => {
    const custom = chart.helmTemplate(ensureHelm(), {
      networkPolicy: { dns: { to: [{ ipBlock: { cidr: "169.254.20.10/32" } }] } },
    });
    expect(custom.code).toBe(0);
    const customPolicies: NetworkPolicy[] = chart
      .byKind(custom.docs, "NetworkPolicy")
      .map((p: K8sObject) => ({ ...p, metadata: { ...p.metadata, namespace: chart.NAMESPACE } }));
    const cache = { ...pod("elsewhere", "node-cache", {}, 57), ip: "169.254.20.10" };
    const clusterDns = pod("kube-system", "coredns-0", { "k8s-app": "kube-dns" }, 53);
    expect(
      ["gateway", "auth", "webhook", "ops", "kafka"].map((c) => [
        c,
        admits(customPolicies, namespaces, podOf(c), cache, 53, "UDP"),
        admits(customPolicies, namespaces, podOf(c), clusterDns, 53, "UDP"),
      ]),
    ).toEqual(["gateway", "auth", "webhook", "ops", "kafka"].map((c) => [c, true, false]));
  });
});
