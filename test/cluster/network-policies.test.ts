import { beforeAll, describe, expect, it } from "@jest/globals";
import { cluster, kubectl, kubectlJson, named } from "./cluster.js";
import { admits, type Namespace, type NetworkPolicy, type Pod } from "../support/network-policy.js";
import { admitted, componentOf, components, componentPorts, refused } from "../support/policy-matrix.js";

// The chart's NetworkPolicies on a live cluster. The local cluster's bridge CNI does not enforce
// policies, so each expectation is judged twice: by the NetworkPolicy rules applied to the objects
// the API server holds (the policies as installed, the pods' real labels and addresses, the
// namespaces' labels), and, for every connection that must be admitted, by a real TCP connection
// from a pod of the caller (the policies in place, the connection opens). The matrix: the chart's
// documented callers (test/support/policy-matrix.ts).
const portOf = (component: string) => componentPorts[component];
const address = (component: string) =>
  component.endsWith("-mongodb")
    ? `${named(component)}-0.${named(component)}:27017`
    : `${named(componentOf(component))}:${componentPorts[component]}`;

let policies: NetworkPolicy[];
let namespaces: Namespace[];
let pods: Pod[];
const toPod = (p: any): Pod => ({
  namespace: p.metadata.namespace,
  name: p.metadata.name,
  labels: p.metadata.labels ?? {},
  ip: p.status.podIP,
  ports: Object.fromEntries(
    p.spec.containers.flatMap((c: any) =>
      (c.ports ?? []).filter((x: any) => x.name).map((x: any) => [x.name, x.containerPort]),
    ),
  ),
});
const podOf = (component: string) => {
  const pod = pods.find(
    (p) => p.namespace === cluster.namespace && p.labels["app.kubernetes.io/component"] === component,
  );
  if (!pod) throw new Error(`no running pod of ${component}`);
  return pod;
};

beforeAll(async () => {
  policies = (await kubectlJson<{ items: NetworkPolicy[] }>("get", "networkpolicy")).items;
  namespaces = (await kubectlJson<{ items: any[] }>("get", "namespaces")).items.map((n) => ({
    name: n.metadata.name,
    labels: n.metadata.labels ?? {},
  }));
  pods = (
    await kubectlJson<{ items: any[] }>("get", "pods", "--all-namespaces", "--field-selector=status.phase=Running")
  ).items
    .filter((p) => !p.metadata.deletionTimestamp && p.status.podIP && !p.spec.hostNetwork)
    .map(toPod);
});

// Runs in the caller's pod (its image has node): resolves each address and connects, with a timeout.
const probe = `
const net = require("node:net"), dns = require("node:dns/promises");
const attempt = (host, port) => new Promise((resolve) => {
  const s = net.connect({ host, port, timeout: 5000 });
  s.once("connect", () => { s.destroy(); resolve("connected"); });
  s.once("timeout", () => { s.destroy(); resolve("timed out"); });
  s.once("error", (e) => resolve(e.code));
});
(async () => {
  const out = {};
  await Promise.all(process.argv.slice(1).map(async (t) => {
    const [host, port] = t.split(":");
    const a = await dns.lookup(host).then((r) => r.address, () => undefined);
    out[t] = a ? await attempt(a, Number(port)) : "no address";
  }));
  console.log(JSON.stringify(out));
})();`;

describe("NetworkPolicies of the installed release", () => {
  it("select every pod of the release for both ingress and egress (the deny-all)", () => {
    const release = pods.filter(
      (p) =>
        p.namespace === cluster.namespace &&
        p.labels["app.kubernetes.io/instance"] === cluster.release &&
        p.labels["app.kubernetes.io/component"] !== "helm-test",
    );
    expect(release.length).toBeGreaterThanOrEqual(new Set(components.map(componentOf)).size);
    const outsider: Pod = {
      namespace: cluster.namespace,
      name: "outsider",
      labels: {},
      ip: "10.244.255.254",
      ports: {},
    };
    for (const pod of release) {
      // An unlabelled pod of the same namespace reaches no port of any release pod.
      for (const port of Object.values(pod.ports))
        expect({ pod: pod.name, port, admitted: admits(policies, namespaces, outsider, pod, port) }).toEqual({
          pod: pod.name,
          port,
          admitted: false,
        });
    }
  });

  for (const source of Object.keys(admitted)) {
    it(`${source} may reach ${admitted[source].join(", ")} (and does), and not ${refused[source].join(", ")}`, async () => {
      const from = podOf(source);
      const judged = Object.fromEntries(
        [...admitted[source], ...refused[source]].map((c) => [
          c,
          admits(policies, namespaces, from, podOf(componentOf(c)), portOf(c)),
        ]),
      );
      expect(judged).toEqual(
        Object.fromEntries([...admitted[source].map((c) => [c, true]), ...refused[source].map((c) => [c, false])]),
      );
      const seen = JSON.parse(
        await kubectl("exec", from.name, "--", "node", "-e", probe, ...admitted[source].map(address)),
      ) as Record<string, string>;
      expect(seen).toEqual(Object.fromEntries(admitted[source].map((c) => [address(c), "connected"])));
    });
  }

  it("admit the ingress controller to the gateway only, and nothing from another namespace", () => {
    const ingress = pods.find((p) => p.labels["app.kubernetes.io/name"] === "traefik");
    const foreign = pods.find((p) => p.namespace === "kube-system");
    expect(ingress && foreign).toBeTruthy();
    const judged = Object.fromEntries(
      components.map((c) => [
        c,
        [
          admits(policies, namespaces, ingress!, podOf(componentOf(c)), portOf(c)),
          admits(policies, namespaces, foreign!, podOf(componentOf(c)), portOf(c)),
        ],
      ]),
    );
    expect(judged).toEqual(Object.fromEntries(components.map((c) => [c, [c === "gateway", false]])));
  });

  it("let every service resolve names (DNS egress to the cluster DNS), and reach no other address on port 53", () => {
    const dns = pods.find((p) => p.labels["k8s-app"] === "kube-dns")!;
    const notDns = pods.find((p) => p.namespace !== cluster.namespace && p.labels["k8s-app"] !== "kube-dns")!;
    const outside: Pod = { namespace: "elsewhere", name: "resolver", labels: {}, ip: "8.8.8.8", ports: {} };
    for (const c of Object.keys(admitted)) {
      expect([
        c,
        ...["UDP", "TCP"].flatMap((protocol) =>
          [dns, notDns, outside].map((to) => admits(policies, namespaces, podOf(c), to, 53, protocol)),
        ),
      ]).toEqual([c, true, false, false, true, false, false]);
    }
  });
});
