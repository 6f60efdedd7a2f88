import { describe, expect, it } from "@jest/globals";
import { kubectl, named } from "./cluster.js";

// The chart's NetworkPolicies, enforced by the cluster (kube-network-policies on the local cluster):
// from a pod of each service, a TCP connection to each component either opens (the policies admit
// that caller) or is dropped. The matrix is the chart's documented callers
// (templates/networkpolicies.yaml): auth <- gateway, webhook; connection <- gateway, file-intake;
// file-intake <- gateway; webhook <- gateway; <svc>-mongodb <- <svc>; kafka <- every service;
// gateway <- the ingress controller only.
const ports: Record<string, number> = { gateway: 8080, auth: 50051, connection: 50052, "file-intake": 50053, webhook: 50054, kafka: 9092 };
const target = (component: string) =>
  component.endsWith("-mongodb") ? `${named(component)}-0.${named(component)}:27017` : `${named(component)}:${ports[component]}`;

const admitted: Record<string, string[]> = {
  gateway: ["auth", "connection", "file-intake", "webhook", "kafka"],
  auth: ["auth-mongodb", "kafka"],
  connection: ["connection-mongodb", "kafka"],
  "file-intake": ["connection", "file-intake-mongodb", "kafka"],
  webhook: ["auth", "webhook-mongodb", "kafka"],
};
const refused: Record<string, string[]> = {
  gateway: ["auth-mongodb", "webhook-mongodb"],
  auth: ["gateway", "connection", "webhook", "connection-mongodb"],
  connection: ["auth", "file-intake", "auth-mongodb"],
  "file-intake": ["auth", "webhook", "connection-mongodb"],
  webhook: ["connection", "file-intake", "gateway", "file-intake-mongodb"],
};

// Runs in the source pod (its image has node): resolves each target, connects with a timeout.
const probe = `
const net = require("node:net"), dns = require("node:dns/promises");
const attempt = (host, port) => new Promise((resolve) => {
  const s = net.connect({ host, port, timeout: 3000 });
  s.once("connect", () => { s.destroy(); resolve("connected"); });
  s.once("timeout", () => { s.destroy(); resolve("timed out"); });
  s.once("error", (e) => resolve(e.code));
});
(async () => {
  const out = {};
  await Promise.all(process.argv.slice(1).map(async (t) => {
    const [host, port] = t.split(":");
    const address = await dns.lookup(host).then((a) => a.address, (e) => undefined);
    out[t] = address ? await attempt(address, Number(port)) : "no address";
  }));
  console.log(JSON.stringify(out));
})();`;

async function connectFrom(source: string, targets: string[]): Promise<Record<string, string>> {
  const out = await kubectl("exec", `deploy/${named(source)}`, "--", "node", "-e", probe, ...targets);
  return JSON.parse(out) as Record<string, string>;
}

describe("NetworkPolicies on a cluster that enforces them", () => {
  for (const source of Object.keys(admitted)) {
    it(`${source} reaches exactly its callees: ${admitted[source].join(", ")}; refused: ${refused[source].join(", ")}`, async () => {
      const outcomes = await connectFrom(source, [...admitted[source], ...refused[source]].map(target));
      const seen = Object.fromEntries(Object.entries(outcomes).map(([t, o]) => [t, o === "connected" ? "admitted" : o === "no address" ? o : "refused"]));
      const expected = Object.fromEntries([
        ...admitted[source].map((c) => [target(c), "admitted"]),
        ...refused[source].map((c) => [target(c), "refused"]),
      ]);
      expect(seen).toEqual(expected);
    });
  }
});
