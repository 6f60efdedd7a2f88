// Which connections the NetworkPolicies of a namespace admit, by the rules of the NetworkPolicy API
// (networking.k8s.io/v1), for the features the chart uses: pod and namespace selectors (matchLabels
// and matchExpressions), ipBlock with except, numeric and named ports, TCP/UDP. A connection is
// admitted when the source's egress allows it (no policy with Egress selects the source, or one of
// those policies has a rule matching the destination) and the destination's ingress allows it
// (likewise). Used where the cluster's CNI does not enforce policies, against the live objects.

export interface Pod {
  namespace: string;
  name: string;
  labels: Record<string, string>;
  ip: string;
  /** containerPort name -> number, for named ports. */
  ports: Record<string, number>;
}
export interface Namespace {
  name: string;
  labels: Record<string, string>;
}
type Selector = {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
};
type Peer = { podSelector?: Selector; namespaceSelector?: Selector; ipBlock?: { cidr: string; except?: string[] } };
type PortRule = { port?: number | string; endPort?: number; protocol?: string };
type Rule = { from?: Peer[]; to?: Peer[]; ports?: PortRule[] };
export interface NetworkPolicy {
  metadata: { name: string; namespace: string };
  spec: { podSelector: Selector; policyTypes?: string[]; ingress?: Rule[]; egress?: Rule[] };
}

export function selects(selector: Selector | undefined, labels: Record<string, string>): boolean {
  if (!selector) return true;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = e.key in labels;
    const value = labels[e.key];
    const ok =
      e.operator === "In"
        ? has && (e.values ?? []).includes(value)
        : e.operator === "NotIn"
          ? !has || !(e.values ?? []).includes(value)
          : e.operator === "Exists"
            ? has
            : e.operator === "DoesNotExist"
              ? !has
              : false;
    if (!ok) return false;
  }
  return true;
}

const ipToInt = (ip: string) => ip.split(".").reduce((n, part) => n * 256 + Number(part), 0);
export function inCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split("/");
  const size = 2 ** (32 - Number(bits));
  return Math.floor(ipToInt(ip) / size) === Math.floor(ipToInt(base) / size);
}

function policyTypes(p: NetworkPolicy): string[] {
  return p.spec.policyTypes ?? (p.spec.egress ? ["Ingress", "Egress"] : ["Ingress"]);
}

function peerMatches(peer: Peer, policyNamespace: string, other: Pod, namespaces: Map<string, Namespace>): boolean {
  if (peer.ipBlock)
    return inCidr(other.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((c) => inCidr(other.ip, c));
  const nsOk = peer.namespaceSelector
    ? selects(peer.namespaceSelector, namespaces.get(other.namespace)?.labels ?? {})
    : other.namespace === policyNamespace;
  return nsOk && selects(peer.podSelector, other.labels);
}

function portMatches(rules: PortRule[] | undefined, port: number, protocol: string, target: Pod): boolean {
  if (!rules || rules.length === 0) return true;
  return rules.some((r) => {
    if ((r.protocol ?? "TCP") !== protocol) return false;
    if (r.port === undefined) return true;
    const p = typeof r.port === "string" ? target.ports[r.port] : r.port;
    return r.endPort ? port >= p && port <= r.endPort : port === p;
  });
}

function direction(
  policies: NetworkPolicy[],
  subject: Pod,
  other: Pod,
  port: number,
  protocol: string,
  destination: Pod,
  type: "Ingress" | "Egress",
  namespaces: Map<string, Namespace>,
): boolean {
  const applying = policies.filter(
    (p) =>
      p.metadata.namespace === subject.namespace &&
      policyTypes(p).includes(type) &&
      selects(p.spec.podSelector, subject.labels),
  );
  if (applying.length === 0) return true;
  return applying.some((p) =>
    (type === "Ingress" ? p.spec.ingress : p.spec.egress)?.some((rule) => {
      const peers = type === "Ingress" ? rule.from : rule.to;
      const peerOk =
        !peers ||
        peers.length === 0 ||
        peers.some((peer) => peerMatches(peer, p.metadata.namespace, other, namespaces));
      return peerOk && portMatches(rule.ports, port, protocol, destination);
    }),
  );
}

/** Whether a connection from one pod to another's port is admitted by the policies. */
export function admits(
  policies: NetworkPolicy[],
  namespaces: Namespace[],
  from: Pod,
  to: Pod,
  port: number,
  protocol = "TCP",
): boolean {
  const ns = new Map(namespaces.map((n) => [n.name, n]));
  return (
    direction(policies, from, to, port, protocol, to, "Egress", ns) &&
    direction(policies, to, from, port, protocol, to, "Ingress", ns)
  );
}
