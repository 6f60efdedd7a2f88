// The Helm chart, checked with a real helm binary (built once from the Go module proxy, see
// deploy/checks/helm.mjs): helm lint --strict and helm template for the default values and for
// every combination of the optional switches; every rendered object validated against the
// Kubernetes schemas (kubernetes-models 4.x) and our own rules (deploy/checks/chart.mjs).
import { describe, it, expect, beforeAll } from "@jest/globals";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ensureHelm } from "../../deploy/checks/helm.mjs";
import { parseSettings } from "../../services/common/src/settings.js";
import { generateIdentity, parseOwnIdentity, parsePublicKeys, TokenMinter, TokenVerifier } from "../../services/common/src/service-identity.js";
import { KAFKA_USERS } from "../../services/common/src/kafka-access.js";
import { schemaFile, schemaText } from "../../deploy/checks/values-schema.mjs";
import * as chart from "../../deploy/checks/chart.mjs";
import type { Combination, K8sObject } from "../../deploy/checks/chart.mjs";

const { RELEASE, SERVICES, find, byKind, envOf } = chart;
const dataServices = SERVICES.filter((s) => s.data);
let helm: string;

beforeAll(() => {
  helm = ensureHelm();
}, 10 * 60_000);

function render(values: unknown = {}, extraArgs: string[] = []): K8sObject[] {
  const t = chart.helmTemplate(helm, values, { extraArgs });
  if (t.code !== 0) throw new Error(`helm template failed: ${t.stderr}`);
  return t.docs;
}

const container = (docs: K8sObject[], component: string) => find(docs, "Deployment", `${RELEASE}-${component}`)!.spec.template.spec.containers[0];
const podComponents = (peers: K8sObject[] = []) => peers.map((p) => p.podSelector?.matchLabels?.["app.kubernetes.io/component"]).filter(Boolean).sort();

describe("Helm chart with the default values", () => {
  let docs: K8sObject[];
  beforeAll(() => {
    docs = render();
  });

  it("passes helm lint --strict", () => {
    const lint = chart.helmLint(helm, {});
    expect(lint.output).toContain("0 chart(s) failed");
    expect(lint.code).toBe(0);
  });

  it("renders the gateway with a Service and an Ingress, and each internal service with a Deployment and a Service", () => {
    for (const s of SERVICES) {
      expect(find(docs, "Deployment", `${RELEASE}-${s.component}`)).toBeDefined();
      expect(find(docs, "Service", `${RELEASE}-${s.component}`)).toBeDefined();
    }
    const ingress = find(docs, "Ingress", `${RELEASE}-gateway`);
    expect(ingress.spec.rules[0].http.paths[0].backend.service).toEqual({ name: `${RELEASE}-gateway`, port: { name: "http" } });
    // Uploads up to MAX_FILE_BYTES (25 MiB) reach the gateway, which answers 413 itself above it.
    expect(Number(ingress.metadata.annotations["nginx.ingress.kubernetes.io/proxy-body-size"])).toBeGreaterThan(26214400);
  });

  it("validates every object against the Kubernetes schemas (kubernetes-models)", async () => {
    expect(docs.length).toBeGreaterThan(30);
    expect(await chart.validateSchemas(docs)).toEqual([]);
  });

  it("hardens every pod: non-root, read-only root with an emptyDir /tmp, no capabilities, no privilege escalation, seccomp RuntimeDefault, no service account token, resources and probes set", () => {
    // Five services, four databases, Kafka (its kafka-setup container creates the topics), the operator CLI's pod.
    expect(chart.workloads(docs).length).toBe(5 + 4 + 1 + 1);
    expect(chart.checkHardening(docs)).toEqual([]);
  });

  it("has selectors that match their pods' labels and references that resolve", () => {
    expect(chart.checkReferences(docs)).toEqual([]);
  });

  it("wires every setting the services read (services/common/src/settings.ts) and every setting of the operator contract as an env var with the same name", () => {
    expect(chart.serviceSettings()).toEqual(expect.arrayContaining(["MAX_FILE_BYTES", "KAFKA_BROKERS", "CREDENTIAL_PEPPER", "CREDENTIAL_PEPPERS", "DATA_KEYS", "FILE_RETENTION_SECONDS"]));
    expect(chart.checkSettingsWired(docs)).toEqual([]);
  });

  it("renders an environment that every service's own settings parser accepts (secrets stand in for their Secret references)", () => {
    const fixed: Record<string, string> = {
      MONGODB_URI: "mongodb://root:pw@db:27017/?authSource=admin",
      DATA_KEYS: `k1:${Buffer.alloc(32, 9).toString("base64")}`,
      CREDENTIAL_PEPPERS: `p2:${"y".repeat(48)}`,
    };
    const deprecations = [{ route: "GET /v1/connections/{id}", deprecation: "2027-01-01T00:00:00Z", sunset: "2027-07-01T00:00:00Z" }];
    for (const rendered of [docs, render({ config: { API_DEPRECATIONS: deprecations, WEBHOOK_RETRY_BASE_SECONDS: 0.5 } })]) {
      for (const s of SERVICES) {
        const standIn = (e: K8sObject): string =>
          fixed[e.name] ??
          (e.name === "SERVICE_IDENTITY_KEY"
            ? generateIdentity(s.component as "auth").key
            : e.name === "SERVICE_IDENTITY_PUBLIC_KEYS"
              ? find(rendered, "ConfigMap", e.valueFrom.configMapKeyRef.name).data[e.valueFrom.configMapKeyRef.key]
              : "x".repeat(48));
        const env = Object.fromEntries((container(rendered, s.component).env as K8sObject[]).map((e) => [e.name, e.value ?? standIn(e)]));
        expect(() => parseSettings(env)).not.toThrow();
        const settings = parseSettings(env);
        expect(settings.GATEWAY_HOST).toBe("0.0.0.0");
        expect(settings.WEBHOOK_ALLOW_INSECURE_URLS).toBe(false);
      }
    }
    const parsed = parseSettings(Object.fromEntries((container(render({ config: { API_DEPRECATIONS: deprecations } }), "gateway").env as K8sObject[]).filter((e) => e.value !== undefined).map((e) => [e.name, e.value])));
    expect(parsed.API_DEPRECATIONS).toHaveLength(1);
    expect(parsed.TRUSTED_PROXY_HOPS).toBe(1);
  });

  it("sets WEBHOOK_ALLOW_INSECURE_URLS to \"false\" and binds every service on 0.0.0.0", () => {
    for (const s of SERVICES) {
      const env = envOf(container(docs, s.component));
      expect(env.WEBHOOK_ALLOW_INSECURE_URLS).toBe("false");
      expect(env.GATEWAY_HOST).toBe("0.0.0.0");
      expect(env.SERVICE_HOST).toBe("0.0.0.0");
      expect(env.MAX_FILE_BYTES).toBe("26214400");
      expect(env.DATA_NAMESPACE).toBe("pi");
    }
  });

  it("points every service at the others over plain h2c URLs of the release's headless Services (every ready pod), and at Kafka", () => {
    const env = envOf(container(docs, "webhook"));
    for (const component of ["auth", "connection", "file-intake", "webhook"]) {
      const headless = find(docs, "Service", `${RELEASE}-${component}-headless`);
      expect(headless.spec.clusterIP).toBe("None");
      expect(headless.spec.selector).toEqual(find(docs, "Service", `${RELEASE}-${component}`).spec.selector);
    }
    expect(env).toMatchObject({
      AUTH_SERVICE_URL: `http://${RELEASE}-auth-headless:50051`,
      CONNECTION_SERVICE_URL: `http://${RELEASE}-connection-headless:50052`,
      FILE_INTAKE_SERVICE_URL: `http://${RELEASE}-file-intake-headless:50053`,
      WEBHOOK_SERVICE_URL: `http://${RELEASE}-webhook-headless:50054`,
      KAFKA_BROKERS: `${RELEASE}-kafka:9092`,
    });
  });

  it("gives each data service its own MongoDB (a mongo:7 StatefulSet) with its URI in a Secret, and the gateway none", () => {
    expect(envOf(container(docs, "gateway")).MONGODB_URI).toBeUndefined();
    for (const s of dataServices) {
      const sts = find(docs, "StatefulSet", `${RELEASE}-${s.component}-mongodb`);
      expect(sts.spec.template.spec.containers[0].image).toBe("mongo:7");
      expect(envOf(container(docs, s.component)).MONGODB_URI).toEqual({ secretKeyRef: { name: `${RELEASE}-${s.component}-mongodb`, key: "uri" } });
      const secret = find(docs, "Secret", `${RELEASE}-${s.component}-mongodb`);
      const uri = Buffer.from(secret.data.uri, "base64").toString();
      expect(uri).toMatch(new RegExp(`^mongodb://root:[A-Za-z0-9]{40}@${RELEASE}-${s.component}-mongodb:27017/\\?authSource=admin$`));
      expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    }
  });

  it("runs Kafka in KRaft mode (apache/kafka:3.9.1, combined broker and controller) with SASL/SCRAM and ACLs, its kafka-setup container creating the topics and the ACLs", () => {
    const kafka = find(docs, "StatefulSet", `${RELEASE}-kafka`);
    const [broker, setup] = kafka.spec.template.spec.containers;
    expect(broker.image).toBe("apache/kafka:3.9.1");
    const config = find(docs, "ConfigMap", `${RELEASE}-kafka-config`);
    const properties: string = config.data["server.properties"];
    expect(properties).toContain("process.roles=broker,controller");
    expect(properties).toContain(`controller.quorum.voters=0@${RELEASE}-kafka-0.${RELEASE}-kafka-headless.${chart.NAMESPACE}.svc:9093`);
    // Every listener authenticates; nothing is allowed without an ACL; only admin is a super user.
    expect(properties).toContain("listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,CLIENT:SASL_PLAINTEXT");
    expect(properties).not.toMatch(/PLAINTEXT:PLAINTEXT|:\/\/.*PLAINTEXT:/);
    expect(properties).toContain("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer");
    expect(properties).toContain("allow.everyone.if.no.acl.found=false");
    expect(properties).toContain("super.users=User:admin\n");
    // Users created at format time: the super user and exactly the users of kafka-access.ts.
    expect(config.data["start.sh"]).toContain(`for user in admin ${KAFKA_USERS.join(" ")}; do`);
    expect(config.data["start.sh"]).toContain('--add-scram "SCRAM-SHA-256=[name=${user},password=${!var}]"');
    const secret = find(docs, "Secret", `${RELEASE}-kafka-users`);
    expect(Object.keys(secret.data).sort()).toEqual(["admin", ...KAFKA_USERS].sort());
    expect(Object.values(secret.data).every((v) => /^[A-Za-z0-9]{32}$/.test(Buffer.from(v as string, "base64").toString()))).toBe(true);
    expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    // Each service as its own user; the super user only in the Kafka pod.
    for (const user of KAFKA_USERS) {
      const env = envOf(container(docs, user));
      expect(env.KAFKA_USERNAME).toBe(user);
      expect(env.KAFKA_PASSWORD).toEqual({ secretKeyRef: { name: `${RELEASE}-kafka-users`, key: user } });
    }
    expect(setup.command).toEqual(["node", "services/ops/dist/kafka-setup.js", "--stay"]);
    expect(envOf(setup)).toMatchObject({ KAFKA_BROKERS: "127.0.0.1:9092", KAFKA_USERNAME: "admin", DATA_NAMESPACE: "pi", KAFKA_PASSWORD: { secretKeyRef: { name: `${RELEASE}-kafka-users`, key: "admin" } } });
    expect(byKind(docs, "Job")).toEqual([]);
    // Never generated again on an upgrade: Kafka keeps the users it was formatted with.
    const upgrade = chart.helmTemplate(helm, { dataKeys: { existingSecret: "my-keys" } }, { extraArgs: ["--is-upgrade"] });
    expect(upgrade.code).not.toBe(0);
    expect(upgrade.stderr).toMatch(/the Secret pi-kafka-users .* refusing to generate new ones on an upgrade/);
  });

  it("with an external Kafka: a hook Job creates the four topics, following DATA_NAMESPACE; the services authenticate only with kafka.auth.existingSecret", () => {
    const external = render({ kafka: { external: { brokers: "kafka.example:9092" } }, config: { DATA_NAMESPACE: "care" } });
    const job = byKind(external, "Job")[0];
    expect(job.metadata.annotations["helm.sh/hook"]).toBe("post-install,post-upgrade");
    const script: string = job.spec.template.spec.containers[0].command.join(" ");
    for (const [topic, partitions] of [["care.connection-events", 3], ["care.file-events", 3], ["care.partner-events", 1], ["care.audit-events", 3]] as const) {
      expect(script).toContain(`--create --if-not-exists --topic "${topic}" --partitions ${partitions}`);
    }
    expect(script).not.toContain('"pi.');
    expect(envOf(container(external, "auth")).KAFKA_USERNAME).toBeUndefined();
    const withUsers = render({ kafka: { external: { brokers: "kafka.example:9092" }, auth: { existingSecret: "my-kafka-users" } } });
    expect(envOf(container(withUsers, "webhook")).KAFKA_PASSWORD).toEqual({ secretKeyRef: { name: "my-kafka-users", key: "webhook" } });
    expect(byKind(withUsers, "Job")).toEqual([]);
  });

  it("follows DATA_NAMESPACE in the topics and ACLs the Kafka pod sets up", () => {
    const setup = find(render({ config: { DATA_NAMESPACE: "care" } }), "StatefulSet", `${RELEASE}-kafka`).spec.template.spec.containers[1];
    expect(envOf(setup).DATA_NAMESPACE).toBe("care");
  });

  it("generates a 48-character CREDENTIAL_PEPPER for auth only, kept across upgrades (lookup) and on uninstall", () => {
    const secret = find(docs, "Secret", `${RELEASE}-credential-pepper`);
    expect(Buffer.from(secret.data.CREDENTIAL_PEPPER, "base64").toString()).toMatch(/^[A-Za-z0-9]{48}$/);
    expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    expect(envOf(container(docs, "auth")).CREDENTIAL_PEPPER).toEqual({ secretKeyRef: { name: `${RELEASE}-credential-pepper`, key: "CREDENTIAL_PEPPER" } });
    const template = readFileSync(join(chart.chartDir, "templates", "secrets.yaml"), "utf8");
    expect(template).toMatch(/lookup "v1" "Secret" \.Release\.Namespace \$name/);
    expect(template).toContain("randAlphaNum 48");
  });

  it("gives every workload (the services and the operator CLI's pod) an Ed25519 identity key of its own, generated at install, kept across upgrades (lookup) and on uninstall", async () => {
    const keysOf = (rendered: K8sObject[]) => parsePublicKeys(find(rendered, "ConfigMap", `${RELEASE}-service-identity`).data.SERVICE_IDENTITY_PUBLIC_KEYS);
    const publicKeys = keysOf(docs);
    expect([...publicKeys.keys()].sort()).toEqual(["auth", "connection", "file-intake", "gateway", "ops", "webhook"]);
    const kids = new Set<string>();
    for (const component of ["gateway", "auth", "connection", "file-intake", "webhook", "ops"]) {
      const secret = find(docs, "Secret", `${RELEASE}-${component}-identity`);
      expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
      const own = parseOwnIdentity(Buffer.from(secret.data.SERVICE_IDENTITY_KEY, "base64").toString());
      expect(own.name).toBe(component);
      // The ConfigMap's public key is this Secret's: a token the workload signs verifies.
      expect(publicKeys.get(own.name)!.has(own.kid)).toBe(true);
      const token = await new TokenMinter(own).token(component === "auth" ? "connection" : "auth");
      expect(await new TokenVerifier(component === "auth" ? "connection" : "auth", publicKeys).verify(token)).toBe(component);
      kids.add(own.kid);
      // Only its own key reaches the workload.
      const env = envOf(component === "ops" ? find(docs, "Deployment", `${RELEASE}-ops`).spec.template.spec.containers[0] : container(docs, component));
      expect(env.SERVICE_IDENTITY_KEY).toEqual({ secretKeyRef: { name: `${RELEASE}-${component}-identity`, key: "SERVICE_IDENTITY_KEY" } });
      expect(env.SERVICE_IDENTITY_PUBLIC_KEYS).toEqual({ configMapKeyRef: { name: `${RELEASE}-service-identity`, key: "SERVICE_IDENTITY_PUBLIC_KEYS" } });
    }
    expect(kids.size).toBe(6);
    const template = readFileSync(join(chart.chartDir, "templates", "service-identity.yaml"), "utf8");
    expect(template).toMatch(/lookup "v1" "Secret" \$root\.Release\.Namespace \$name/);
    expect(template).toContain('genPrivateKey "ed25519"');
  });

  it("takes a workload's identity from a Secret of the operator's, with its public key given; refuses one without", () => {
    const external = generateIdentity("webhook");
    const rendered = render({ webhook: { identity: { existingSecret: "my-webhook-key", existingSecretKey: "key", publicKey: external.publicKey.slice("webhook:".length) } } });
    expect(find(rendered, "Secret", `${RELEASE}-webhook-identity`)).toBeUndefined();
    expect(envOf(container(rendered, "webhook")).SERVICE_IDENTITY_KEY).toEqual({ secretKeyRef: { name: "my-webhook-key", key: "key" } });
    const own = parseOwnIdentity(external.key);
    const keys = parsePublicKeys(find(rendered, "ConfigMap", `${RELEASE}-service-identity`).data.SERVICE_IDENTITY_PUBLIC_KEYS);
    expect(keys.get("webhook")!.has(own.kid)).toBe(true);
    expect(chart.checkReferences(rendered, { externalSecrets: ["my-webhook-key"] })).toEqual([]);
    const t = chart.helmTemplate(helm, { webhook: { identity: { existingSecret: "my-webhook-key" } } });
    expect(t.code).not.toBe(0);
    expect(t.stderr).toContain("webhook.identity.publicKey is required with webhook.identity.existingSecret");
  });

  it("runs the operator CLI as a workload of its own (idle, hardened, the gateway's image, no Service), pointed at the internal services", () => {
    const ops = find(docs, "Deployment", `${RELEASE}-ops`);
    const c = ops.spec.template.spec.containers[0];
    expect(c.image).toBe(container(docs, "gateway").image);
    expect(c.command[0]).toBe("node");
    expect(find(docs, "Service", `${RELEASE}-ops`)).toBeUndefined();
    expect(envOf(c)).toMatchObject({ AUTH_SERVICE_URL: `http://${RELEASE}-auth-headless:50051`, CONNECTION_SERVICE_URL: `http://${RELEASE}-connection-headless:50052`, WEBHOOK_SERVICE_URL: `http://${RELEASE}-webhook-headless:50054` });
    const off = render({ ops: { enabled: false } });
    expect(find(off, "Deployment", `${RELEASE}-ops`)).toBeUndefined();
    expect(find(off, "Secret", `${RELEASE}-ops-identity`)).toBeUndefined();
    expect(find(off, "NetworkPolicy", `${RELEASE}-ops`)).toBeUndefined();
    expect(podComponents(find(off, "NetworkPolicy", `${RELEASE}-auth`).spec.ingress.flatMap((r: K8sObject) => r.from))).toEqual(["gateway", "webhook"]);
  });

  it("uses a given pepper, or an existing Secret of the operator's", () => {
    const given = "p".repeat(40);
    const withValue = find(render({ auth: { credentialPepper: { value: given } } }), "Secret", `${RELEASE}-credential-pepper`);
    expect(Buffer.from(withValue.data.CREDENTIAL_PEPPER, "base64").toString()).toBe(given);
    const external = render({ auth: { credentialPepper: { existingSecret: "my-pepper", existingSecretKey: "pepper" } } });
    expect(find(external, "Secret", `${RELEASE}-credential-pepper`)).toBeUndefined();
    expect(envOf(container(external, "auth")).CREDENTIAL_PEPPER).toEqual({ secretKeyRef: { name: "my-pepper", key: "pepper" } });
  });

  it("passes newer peppers (CREDENTIAL_PEPPERS) from the pepper's Secret to auth when it has them, optional, and keeps them in a generated Secret", () => {
    expect(envOf(container(docs, "auth")).CREDENTIAL_PEPPERS).toEqual({ secretKeyRef: { name: `${RELEASE}-credential-pepper`, key: "CREDENTIAL_PEPPERS", optional: true } });
    const external = render({ auth: { credentialPepper: { existingSecret: "my-pepper", existingSecretKey: "pepper" } } });
    expect(envOf(container(external, "auth")).CREDENTIAL_PEPPERS).toEqual({ secretKeyRef: { name: "my-pepper", key: "CREDENTIAL_PEPPERS", optional: true } });
    expect(readFileSync(join(chart.chartDir, "templates", "secrets.yaml"), "utf8")).toMatch(/hasKey \(default dict \$existing\.data\) "CREDENTIAL_PEPPERS"/);
  });

  it("generates DATA_KEYS (one key k1 of 32 random bytes) for auth and file-intake only, kept across upgrades (lookup) and on uninstall", () => {
    const secret = find(docs, "Secret", `${RELEASE}-data-keys`);
    const value = Buffer.from(secret.data.DATA_KEYS, "base64").toString();
    expect(value).toMatch(/^k1:[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(value.slice(3), "base64")).toHaveLength(32);
    expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    for (const s of SERVICES) {
      const ref = envOf(container(docs, s.component)).DATA_KEYS;
      if (s.key === "auth" || s.key === "fileIntake") expect(ref).toEqual({ secretKeyRef: { name: `${RELEASE}-data-keys`, key: "DATA_KEYS" } });
      else expect(ref).toBeUndefined();
    }
    const template = readFileSync(join(chart.chartDir, "templates", "secrets.yaml"), "utf8");
    expect(template).toMatch(/lookup "v1" "Secret" \.Release\.Namespace \$name/);
    expect(template).toContain("randBytes 32");
  });

  it("never generates DATA_KEYS again on an upgrade: without the Secret in the cluster the upgrade fails", () => {
    const t = chart.helmTemplate(helm, {}, { extraArgs: ["--is-upgrade"] });
    expect(t.code).not.toBe(0);
    expect(t.stderr).toMatch(/refusing to generate new keys on an upgrade/);
    // With the keys given (or an existing Secret of the operator's) an upgrade renders.
    expect(find(render({ dataKeys: { existingSecret: "my-keys" }, kafka: { auth: { existingSecret: "my-kafka-users" } } }, ["--is-upgrade"]), "Secret", `${RELEASE}-data-keys`)).toBeUndefined();
  });

  it("uses given DATA_KEYS or an existing Secret of the operator's; with generate=false (GitOps) a render without them fails", () => {
    const given = `k2:${Buffer.alloc(32, 2).toString("base64url")},k1:${Buffer.alloc(32, 1).toString("base64")}`;
    const withValue = find(render({ dataKeys: { value: given } }), "Secret", `${RELEASE}-data-keys`);
    expect(Buffer.from(withValue.data.DATA_KEYS, "base64").toString()).toBe(given);
    const external = render({ dataKeys: { existingSecret: "my-keys", existingSecretKey: "keys" } });
    expect(find(external, "Secret", `${RELEASE}-data-keys`)).toBeUndefined();
    expect(envOf(container(external, "file-intake")).DATA_KEYS).toEqual({ secretKeyRef: { name: "my-keys", key: "keys" } });
    const strict = chart.helmTemplate(helm, { dataKeys: { generate: false } });
    expect(strict.code).not.toBe(0);
    expect(strict.stderr).toMatch(/dataKeys: set dataKeys.existingSecret/);
  });

  it("probes the internal services with native gRPC health checks (liveness on the liveness service name) and the gateway on /healthz and /readyz", () => {
    for (const s of SERVICES.filter((x) => x.key !== "gateway")) {
      const c = container(docs, s.component);
      const port = c.ports[0].containerPort;
      expect(c.livenessProbe.grpc).toEqual({ port, service: "liveness" });
      expect(c.readinessProbe.grpc).toEqual({ port });
    }
    const gw = container(docs, "gateway");
    expect(gw.livenessProbe.httpGet).toMatchObject({ path: "/healthz", port: "http" });
    expect(gw.readinessProbe.httpGet).toMatchObject({ path: "/readyz", port: "http" });
  });

  it("denies all traffic of the release's pods, then admits only each component's named callers", () => {
    const policy = (component: string) => find(docs, "NetworkPolicy", `${RELEASE}-${component}`)!.spec;
    const denyAll = policy("deny-all");
    expect(denyAll.policyTypes).toEqual(["Ingress", "Egress"]);
    expect(denyAll.ingress).toBeUndefined();
    expect(denyAll.egress).toBeUndefined();
    const callers: Record<string, string[]> = {
      auth: ["gateway", "ops", "webhook"],
      connection: ["file-intake", "gateway", "ops"],
      "file-intake": ["gateway"],
      webhook: ["gateway", "ops"],
    };
    for (const [component, expected] of Object.entries(callers)) {
      expect(podComponents(policy(component).ingress.flatMap((r: K8sObject) => r.from))).toEqual(expected);
    }
    const gatewayFrom = policy("gateway").ingress[0].from[0];
    expect(gatewayFrom.namespaceSelector.matchLabels).toEqual({ "kubernetes.io/metadata.name": "ingress-nginx" });
    // The gateway calls auth, connection and file-intake, and checks the webhook service's health
    // for /readyz; the operator CLI has a pod of its own, which nothing may reach.
    expect(podComponents(policy("gateway").egress.flatMap((r: K8sObject) => r.to ?? []))).toEqual(["auth", "connection", "file-intake", "kafka", "webhook"]);
    expect(policy("ops").ingress).toEqual([]);
    expect(podComponents(policy("ops").egress.flatMap((r: K8sObject) => r.to ?? []))).toEqual(["auth", "connection", "webhook"]);
    expect(policy("ops").egress.flatMap((r: K8sObject) => r.ports).filter((p: K8sObject) => p.port !== 53)).toEqual([
      { port: 50051, protocol: "TCP" },
      { port: 50052, protocol: "TCP" },
      { port: 50054, protocol: "TCP" },
    ]);
    for (const s of dataServices) {
      expect(podComponents(policy(`${s.component}-mongodb`).ingress[0].from)).toEqual([s.component]);
      expect(policy(`${s.component}-mongodb`).egress).toEqual([]);
    }
    expect(podComponents(policy("kafka").ingress[0].from)).toEqual(["auth", "connection", "file-intake", "gateway", "webhook"]);
    const webhookInternet = policy("webhook").egress.find((r: K8sObject) => r.to?.[0]?.ipBlock);
    expect(webhookInternet.ports).toEqual([{ port: 443, protocol: "TCP" }]);
    expect(webhookInternet.to[0].ipBlock.except).toEqual(expect.arrayContaining(["10.0.0.0/8", "169.254.0.0/16"]));
  });

  it("opens extra egress (for example to a telemetry collector) on every application service when asked", () => {
    const rule = { to: [{ ipBlock: { cidr: "10.1.2.3/32" } }], ports: [{ port: 4317, protocol: "TCP" }] };
    const withExtra = render({ networkPolicy: { extraEgress: [rule] } });
    for (const s of SERVICES) {
      expect(find(withExtra, "NetworkPolicy", `${RELEASE}-${s.component}`).spec.egress).toContainEqual(rule);
    }
  });

  it("prints NOTES that show how to reach the API and run operator commands with kubectl exec, and warn when hardening is switched off", () => {
    const notes = chart.renderNotes(helm, {});
    expect(notes).toContain(`kubectl -n ${chart.NAMESPACE} exec deploy/${RELEASE}-ops -- node services/ops/dist/main.js info --json`);
    expect(notes).not.toContain(`exec deploy/${RELEASE}-gateway`);
    expect(notes).toContain(`${RELEASE}-ops-identity`);
    expect(notes).toContain(`${RELEASE}-credential-pepper`);
    expect(notes).toContain(`${RELEASE}-data-keys`);
    expect(notes).not.toContain("WARNING");
    const relaxed = chart.renderNotes(helm, { ingress: { enabled: false }, networkPolicy: { enabled: false }, config: { WEBHOOK_ALLOW_INSECURE_URLS: true } });
    expect(relaxed).toContain(`port-forward svc/${RELEASE}-gateway`);
    expect(relaxed).toMatch(/WARNING: networkPolicy.enabled is false/);
    expect(relaxed).toMatch(/WARNING: config.WEBHOOK_ALLOW_INSECURE_URLS is true/);
  });

  it("renders the same objects twice, apart from the generated secrets", () => {
    const generated = (o: K8sObject) => o.kind === "Secret" || (o.kind === "ConfigMap" && o.metadata.name === `${RELEASE}-service-identity`);
    const strip = (objs: K8sObject[]) => objs.map((o) => (generated(o) ? { ...o, data: Object.keys(o.data ?? {}) } : o));
    expect(strip(render())).toEqual(strip(docs));
  });

  it("runs the images Skaffold builds (one artifact per service from deploy/Dockerfile, image values templated)", () => {
    expect(chart.skaffoldConfig().apiVersion).toMatch(/^skaffold\/v4beta\d+$/);
    expect(chart.checkSkaffoldImages(docs)).toEqual([]);
  });

  it("deploy/Dockerfile copies the manifest of every npm workspace before npm ci", () => {
    expect(chart.checkDockerfileWorkspaces()).toEqual([]);
  });
});

describe("values.schema.json", () => {
  const rejects = (values: unknown, message: RegExp) => {
    const t = chart.helmTemplate(helm, values);
    expect(t.code).not.toBe(0);
    expect(t.stderr).toMatch(message);
    const lint = chart.helmLint(helm, values);
    expect(lint.code).not.toBe(0);
  };

  it("is the output of deploy/checks/values-schema.mjs (edit that, then run it)", () => {
    expect(readFileSync(schemaFile, "utf8")).toBe(schemaText());
  });

  it("rejects an unknown top-level key (a typo) in helm template and helm lint", () => {
    rejects({ gatway: { replicas: 2 } }, /Additional property gatway is not allowed/);
  });

  it("rejects a typo inside a service block and an unknown setting", () => {
    rejects({ auth: { replica: 2 } }, /replica/);
    rejects({ config: { MAX_FILE_BYTE: 1 } }, /MAX_FILE_BYTE/);
  });

  it("rejects a pepper shorter than 32 characters, malformed DATA_KEYS and a rate limit below the contract's floor", () => {
    rejects({ auth: { credentialPepper: { value: "short" } } }, /credentialPepper/);
    rejects({ dataKeys: { value: "k1:short" } }, /dataKeys/);
    rejects({ config: { FILE_RETENTION_SECONDS: 0 } }, /FILE_RETENTION_SECONDS/);
    rejects({ config: { RATE_LIMIT_V1_PER_SECOND: 10 } }, /RATE_LIMIT_V1_PER_SECOND/);
  });

  it("keeps every service block to one shape", () => {
    const values = readFileSync(join(chart.chartDir, "values.yaml"), "utf8");
    for (const s of SERVICES) {
      const block = values.slice(values.indexOf(`\n${s.key}:\n`));
      for (const key of ["enabled", "image", "replicas", "resources", "config", "autoscaling", "podDisruptionBudget"]) {
        expect(block).toMatch(new RegExp(`^\\n${s.key}:\\n(  .*\\n|\\s*\\n)*?  ${key}:`));
      }
    }
  });
});

describe("every combination of the optional switches (ingress, networkPolicy, pdb, hpa, external Mongo, external Kafka)", () => {
  const combinations = chart.allCombinations().map((c) => [chart.describeCombination(c), c] as [string, Combination]);

  it.each(combinations)("%s: helm lint --strict and helm template pass; every object is valid and hardened; references resolve; settings are wired", async (_name, combination) => {
    const values = chart.valuesFor(combination);
    const lint = chart.helmLint(helm, values);
    expect(lint.code).toBe(0);
    const docs = render(values);
    const externalSecrets = combination.externalMongo ? dataServices.map((s) => `${s.component}-mongodb-uri`) : [];
    expect(await chart.validateSchemas(docs)).toEqual([]);
    expect(chart.checkHardening(docs)).toEqual([]);
    expect(chart.checkReferences(docs, { externalSecrets })).toEqual([]);
    expect(chart.checkSettingsWired(docs)).toEqual([]);

    expect(byKind(docs, "Ingress")).toHaveLength(combination.ingress ? 1 : 0);
    expect(byKind(docs, "NetworkPolicy").length > 0).toBe(combination.networkPolicy);
    expect(byKind(docs, "PodDisruptionBudget")).toHaveLength(combination.pdb ? 5 : 0);
    expect(byKind(docs, "HorizontalPodAutoscaler")).toHaveLength(combination.hpa ? 5 : 0);
    const mongo = byKind(docs, "StatefulSet").filter((s: K8sObject) => s.metadata.name.endsWith("-mongodb"));
    expect(mongo).toHaveLength(combination.externalMongo ? 0 : 4);
    expect(find(docs, "StatefulSet", `${RELEASE}-kafka`) === undefined).toBe(combination.externalKafka);
    const env = envOf(container(docs, "connection"));
    if (combination.externalMongo) expect(env.MONGODB_URI).toEqual({ secretKeyRef: { name: "connection-mongodb-uri", key: "uri" } });
    if (combination.externalKafka) {
      expect(env.KAFKA_BROKERS).toBe("kafka-0.kafka.example:9092,kafka-1.kafka.example:9094");
      if (combination.networkPolicy) {
        const egress = find(docs, "NetworkPolicy", `${RELEASE}-connection`).spec.egress.flatMap((r: K8sObject) => r.ports ?? []);
        expect(egress).toEqual(expect.arrayContaining([{ port: 9092, protocol: "TCP" }, { port: 9094, protocol: "TCP" }]));
      }
    }
  });
});
