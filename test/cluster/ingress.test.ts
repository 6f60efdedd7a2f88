import { describe, expect, it } from "@jest/globals";
import { connect, type PeerCertificate } from "node:tls";
import { X509Certificate } from "node:crypto";
import { parseAllDocuments } from "yaml";
import { cluster, helm, kubectlJson, named } from "./cluster.js";

// What the ingress publishes and how (docs/security.md, "TLS on the ingress", "What the ingress
// publishes"), and the chart's generated secrets under a render against the cluster ("Generated
// secrets"). The tests reach the ingress by its name (test/support/resolve.cjs) and trust only the
// CA the chart generated (NODE_EXTRA_CA_CERTS), as test-cluster.sh sets them up.
const host = new URL(cluster.baseUrl).hostname;
const secretData = async (name: string) =>
  (await kubectlJson<{ data: Record<string, string> }>("get", "secret", name)).data;

describe("the partner entry: Gateway API", () => {
  it("the release reaches partners through its HTTPRoute on the Gateway it created, accepted by Traefik with every reference resolved, and through no Ingress", async () => {
    const route = await kubectlJson<any>("get", "httproute", named("gateway"));
    const parents = route.status?.parents ?? [];
    expect(parents.map((p: any) => [p.parentRef.name, p.controllerName])).toEqual([
      [named("partner-api"), "traefik.io/gateway-controller"],
    ]);
    const conditions = Object.fromEntries(parents[0].conditions.map((c: any) => [c.type, c.status]));
    expect(conditions).toMatchObject({ Accepted: "True", ResolvedRefs: "True" });
    const gateway = await kubectlJson<any>("get", "gateway", named("partner-api"));
    expect(Object.fromEntries(gateway.status.conditions.map((c: any) => [c.type, c.status]))).toMatchObject({
      Accepted: "True",
      Programmed: "True",
    });
    expect((await kubectlJson<{ items: unknown[] }>("get", "ingress")).items).toEqual([]);
    const res = await fetch(`${cluster.baseUrl}/openapi.json`);
    expect(res.status).toBe(200);
  });
});

describe("the ingress", () => {
  it("serves the partner API over HTTPS with the chart's certificate, verified against the CA in <release>-gateway-tls", async () => {
    expect(cluster.baseUrl).toMatch(/^https:\/\//);
    const ca = new X509Certificate(Buffer.from((await secretData(named("gateway-tls")))["ca.crt"]!, "base64"));
    const peer = await new Promise<PeerCertificate & { authorized: boolean }>((resolve, reject) => {
      const socket = connect({ host, port: 443, servername: host }, () => {
        resolve({ ...socket.getPeerCertificate(), authorized: socket.authorized });
        socket.end();
      });
      socket.on("error", reject);
    });
    expect(peer.authorized).toBe(true);
    const served = new X509Certificate(peer.raw);
    expect(served.checkIssued(ca)).toBe(true);
    expect(served.checkHost(host)).toBe(host);
    const res = await fetch(`${cluster.baseUrl}/openapi.json`);
    expect(res.status).toBe(200);
  });

  it("does not publish /readyz or /healthz (they stay the pods' probes): 404 from the controller, not the gateway's answer", async () => {
    for (const path of ["/readyz", "/healthz", "/", "/metrics"]) {
      const res = await fetch(`${cluster.baseUrl}${path}`);
      const body = await res.text();
      expect([path, res.status]).toEqual([path, 404]);
      expect(body).not.toMatch(/"status"|failing|ready/);
    }
    // The partner API's paths are routed (an answer of the gateway's: its error envelope).
    const token = await fetch(`${cluster.baseUrl}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=client_credentials",
    });
    expect(token.status).toBe(400);
    expect(["invalid_request", "invalid_client"]).toContain(((await token.json()) as { error: string }).error);
  });

  it("redirects plain HTTP to HTTPS and serves nothing of the API over it", async () => {
    const http = process.env.CLUSTER_INGRESS_HTTP ?? `http://${host}`;
    for (const path of ["/oauth/token", "/v1/connections/con_x", "/readyz"]) {
      const res = await fetch(`${http}${path}`, { redirect: "manual" });
      expect([path, [301, 302, 307, 308].includes(res.status)]).toEqual([path, true]);
      expect(res.headers.get("location")).toBe(`https://${host}${path}`);
    }
  });
});

describe("secrets the chart generated, under a render against the cluster", () => {
  it("a server-side dry run of an upgrade renders every generated Secret exactly as it is in the cluster (looked up, never generated again)", async () => {
    const out = await helm(
      "upgrade",
      cluster.release,
      "charts/partner-integration",
      "--reuse-values",
      "--dry-run=server",
    );
    const manifest = out.slice(out.indexOf("MANIFEST:") + "MANIFEST:".length, out.indexOf("\nNOTES:"));
    const secrets = parseAllDocuments(manifest)
      .map((d) => d.toJS())
      .filter((o) => o?.kind === "Secret");
    const names = secrets.map((s) => s.metadata.name as string).sort();
    expect(names).toEqual(
      expect.arrayContaining([
        named("credential-pepper"),
        named("data-keys"),
        named("gateway-identity"),
        named("gateway-tls"),
        named("ingress-ca"),
      ]),
    );
    for (const s of secrets)
      expect([s.metadata.name, s.data]).toEqual([s.metadata.name, await secretData(s.metadata.name)]);
  });

  it("an offline render (helm template, as GitOps tools render) of the same values refuses to generate them", async () => {
    const values = await helm("get", "values", cluster.release, "-o", "yaml");
    const { writeFileSync, mkdtempSync, rmSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "pi-values-"));
    try {
      writeFileSync(join(dir, "values.yaml"), values);
      await expect(
        helm("template", cluster.release, "charts/partner-integration", "-f", join(dir, "values.yaml")),
      ).rejects.toThrow(/cannot be generated: this render has no cluster/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
