// The Helm chart, checked with a real helm binary (built once from the Go module proxy, see
// deploy/checks/helm.mjs): helm lint --strict and helm template for the default values and for
// every combination of the optional switches; every rendered object validated against the
// Kubernetes schemas (kubernetes-models 4.x) and our own rules (deploy/checks/chart.mjs).
import { describe, it, expect, beforeAll } from "@jest/globals";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { runInNewContext } from "node:vm";
import { X509Certificate, createPrivateKey } from "node:crypto";
import { databaseName } from "../../services/common/src/store/mongo.js";
import { ensureHelm } from "../../deploy/checks/helm.mjs";
import { parseSettings } from "../../services/common/src/runtime/settings.js";
import {
  generateIdentity,
  parseOwnIdentity,
  parsePublicKeys,
  TokenMinter,
  TokenVerifier,
} from "../../services/common/src/rpc/service-identity.js";
import { KAFKA_USERS } from "../../services/common/src/events/kafka-access.js";
import { schemaFile, schemaText } from "../../deploy/checks/values-schema.mjs";
import { parse as chartYaml } from "yaml";
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

const container = (docs: K8sObject[], component: string) =>
  find(docs, "Deployment", `${RELEASE}-${component}`)!.spec.template.spec.containers[0];
const podComponents = (peers: K8sObject[] = []) =>
  peers
    .map((p) => p.podSelector?.matchLabels?.["app.kubernetes.io/component"])
    .filter(Boolean)
    .sort();

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

  it("renders the gateway with a Service and an Ingress, each internal service with a Deployment and a Service, and extraction (which nobody calls) with a Deployment alone", () => {
    for (const s of SERVICES) {
      expect(find(docs, "Deployment", `${RELEASE}-${s.component}`)).toBeDefined();
      if (s.key !== "extraction") expect(find(docs, "Service", `${RELEASE}-${s.component}`)).toBeDefined();
    }
    expect(find(docs, "Service", `${RELEASE}-extraction`)).toBeUndefined();
    expect(find(docs, "Service", `${RELEASE}-extraction-headless`)).toBeUndefined();
    const ingress = find(docs, "Ingress", `${RELEASE}-gateway`);
    for (const path of ingress.spec.rules[0].http.paths)
      expect(path.backend.service).toEqual({ name: `${RELEASE}-gateway`, port: { name: "http" } });
    // Uploads up to MAX_FILE_BYTES (25 MiB) reach the gateway, which answers 413 itself above it.
    expect(Number(ingress.metadata.annotations["nginx.ingress.kubernetes.io/proxy-body-size"])).toBeGreaterThan(
      26214400,
    );
  });

  it("validates every object against the Kubernetes schemas (kubernetes-models)", async () => {
    expect(docs.length).toBeGreaterThan(30);
    expect(await chart.validateSchemas(docs)).toEqual([]);
  });

  it("hardens every pod: non-root, read-only root with an emptyDir /tmp, no capabilities, no privilege escalation, seccomp RuntimeDefault, no service account token, resources and probes set", () => {
    // Six services, four databases, Kafka (its kafka-setup container creates the topics), the operator CLI's pod.
    expect(chart.workloads(docs).length).toBe(6 + 4 + 1 + 1);
    expect(chart.checkHardening(docs)).toEqual([]);
  });

  it("has selectors that match their pods' labels and references that resolve", () => {
    expect(chart.checkReferences(docs)).toEqual([]);
  });

  it("wires every setting the services read (services/common/src/runtime/settings.ts) and every setting of the operator contract as an env var with the same name", () => {
    expect(chart.serviceSettings()).toEqual(
      expect.arrayContaining([
        "MAX_FILE_BYTES",
        "KAFKA_BROKERS",
        "CREDENTIAL_PEPPER",
        "CREDENTIAL_PEPPERS",
        "DATA_KEYS",
        "FILE_RETENTION_SECONDS",
      ]),
    );
    expect(chart.checkSettingsWired(docs)).toEqual([]);
  });

  it("renders an environment that every service's own settings parser accepts (secrets stand in for their Secret references)", () => {
    const fixed: Record<string, string> = {
      MONGODB_URI: "mongodb://root:pw@db:27017/?authSource=admin",
      DATA_KEYS: `k1:${Buffer.alloc(32, 9).toString("base64")}`,
      CREDENTIAL_PEPPERS: `p2:${"y".repeat(48)}`,
    };
    const deprecations = [
      { route: "GET /v1/connections/{id}", deprecation: "2027-01-01T00:00:00Z", sunset: "2027-07-01T00:00:00Z" },
    ];
    for (const rendered of [
      docs,
      render({ config: { API_DEPRECATIONS: deprecations, WEBHOOK_RETRY_BASE_SECONDS: 0.5 } }),
    ]) {
      for (const s of SERVICES) {
        const standIn = (e: K8sObject): string =>
          fixed[e.name] ??
          (e.name === "SERVICE_IDENTITY_KEY"
            ? generateIdentity(s.component as "auth").key
            : e.name === "SERVICE_IDENTITY_PUBLIC_KEYS"
              ? find(rendered, "ConfigMap", e.valueFrom.configMapKeyRef.name).data[e.valueFrom.configMapKeyRef.key]
              : "x".repeat(48));
        // As the kubelet does: a value's $(NAME) is the value of an env entry defined before it.
        const env: Record<string, string> = {};
        for (const e of container(rendered, s.component).env as K8sObject[]) {
          env[e.name] =
            e.value !== undefined
              ? String(e.value).replace(/\$\(([A-Z_]+)\)/g, (_m: string, n: string) => env[n] ?? "")
              : standIn(e);
        }
        expect(() => parseSettings(env)).not.toThrow();
        const settings = parseSettings(env);
        expect(settings.GATEWAY_HOST).toBe("0.0.0.0");
        expect(settings.WEBHOOK_ALLOW_INSECURE_URLS).toBe(false);
      }
    }
    const parsed = parseSettings(
      Object.fromEntries(
        (container(render({ config: { API_DEPRECATIONS: deprecations } }), "gateway").env as K8sObject[])
          .filter((e) => e.value !== undefined)
          .map((e) => [e.name, e.value]),
      ),
    );
    expect(parsed.API_DEPRECATIONS).toHaveLength(1);
    expect(parsed.TRUSTED_PROXY_HOPS).toBe(1);
  });

  it('sets WEBHOOK_ALLOW_INSECURE_URLS to "false" and binds every service on 0.0.0.0', () => {
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
      AUTH_ADMIN_URL: `http://${RELEASE}-auth-headless:50061`,
      CONNECTION_ADMIN_URL: `http://${RELEASE}-connection-headless:50062`,
      WEBHOOK_ADMIN_URL: `http://${RELEASE}-webhook-headless:50064`,
      KAFKA_BROKERS: `${RELEASE}-kafka:9092`,
    });
  });

  it("serves each service's admin RPCs on a port of its own (auth, connection, webhook; file-intake has none), in its Services and pods", () => {
    const portsOf = (svc: K8sObject) => Object.fromEntries(svc.spec.ports.map((p: K8sObject) => [p.name, p.port]));
    for (const [component, data, admin] of [
      ["auth", 50051, 50061],
      ["connection", 50052, 50062],
      ["webhook", 50054, 50064],
    ] as const) {
      // The ClusterIP Service also publishes the metrics port (for the ServiceMonitor), the headless one not.
      expect(portsOf(find(docs, "Service", `${RELEASE}-${component}`))).toEqual({ grpc: data, admin, metrics: 9464 });
      expect(portsOf(find(docs, "Service", `${RELEASE}-${component}-headless`))).toEqual({ grpc: data, admin });
      expect(container(docs, component).ports.map((p: K8sObject) => [p.name, p.containerPort])).toEqual([
        ["grpc", data],
        ["admin", admin],
        ["metrics", 9464],
      ]);
      expect(envOf(container(docs, component))[`${component.toUpperCase()}_ADMIN_PORT`]).toBe(String(admin));
    }
    expect(portsOf(find(docs, "Service", `${RELEASE}-file-intake`))).toEqual({ grpc: 50053, metrics: 9464 });
    // Probes stay on the data port.
    expect(container(docs, "auth").readinessProbe.grpc.port).toBe(50051);
  });

  it("gives each data service its own MongoDB (a StatefulSet of mongo at an exact tag, 7.0.16), reached as a user of its own, and the gateway none", () => {
    expect(envOf(container(docs, "gateway")).MONGODB_URI).toBeUndefined();
    for (const s of dataServices) {
      const sts = find(docs, "StatefulSet", `${RELEASE}-${s.component}-mongodb`);
      expect(sts.spec.template.spec.containers[0].image).toBe("mongo:7.0.16");
      const db = databaseName("pi", s.component);
      const env = envOf(container(docs, s.component));
      expect(env.MONGODB_PASSWORD).toEqual({
        secretKeyRef: { name: `${RELEASE}-${s.component}-mongodb-user`, key: "mongodb-password" },
      });
      expect(env.MONGODB_URI).toBe(
        `mongodb://${s.component}:$(MONGODB_PASSWORD)@${RELEASE}-${s.component}-mongodb:27017/${db}?authSource=${db}`,
      );
      if (s.component === "auth") {
        // The audit retention sweep's own user, on the audit database (role auditRetention).
        expect(env.AUDIT_RETENTION_MONGODB_PASSWORD).toEqual({
          secretKeyRef: { name: `${RELEASE}-auth-mongodb-audit-retention`, key: "mongodb-password" },
        });
        expect(env.AUDIT_RETENTION_MONGODB_URI).toBe(
          `mongodb://auth-audit-retention:$(AUDIT_RETENTION_MONGODB_PASSWORD)@${RELEASE}-auth-mongodb:27017/${databaseName("pi", "auth_audit")}?authSource=${db}`,
        );
      } else expect(env.AUDIT_RETENTION_MONGODB_URI).toBeUndefined();
      for (const name of [
        `${RELEASE}-${s.component}-mongodb`,
        `${RELEASE}-${s.component}-mongodb-user`,
        ...(s.component === "auth" ? [`${RELEASE}-auth-mongodb-audit-retention`] : []),
      ]) {
        const secret = find(docs, "Secret", name);
        expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
        expect(Buffer.from(Object.values(secret.data)[0] as string, "base64").toString()).toMatch(/^[A-Za-z0-9]{40}$/);
      }
      // The root Secret holds the root password only (no URI with root's credentials any more).
      expect(Object.keys(find(docs, "Secret", `${RELEASE}-${s.component}-mongodb`).data)).toEqual([
        "mongodb-root-password",
      ]);
    }
  });

  it("never lets a service reference its database's root Secret: only the database's pod reads it", () => {
    for (const s of dataServices) {
      const rootSecret = `${RELEASE}-${s.component}-mongodb`;
      for (const w of chart.workloads(docs).filter((x: K8sObject) => x.metadata.name !== rootSecret)) {
        const pod = w.spec.template.spec;
        const refs = [
          ...pod.containers.flatMap((c: K8sObject) =>
            (c.env ?? []).map((e: K8sObject) => e.valueFrom?.secretKeyRef?.name),
          ),
          ...pod.containers.flatMap((c: K8sObject) => (c.envFrom ?? []).map((e: K8sObject) => e.secretRef?.name)),
          ...(pod.volumes ?? []).map((v: K8sObject) => v.secret?.secretName),
        ];
        expect(refs).not.toContain(rootSecret);
      }
      const mongod = find(docs, "StatefulSet", rootSecret).spec.template.spec.containers[0];
      expect(envOf(mongod)).toMatchObject({
        MONGO_INITDB_ROOT_PASSWORD: { secretKeyRef: { name: rootSecret, key: "mongodb-root-password" } },
        APP_PASSWORD: { secretKeyRef: { name: `${rootSecret}-user`, key: "mongodb-password" } },
        APP_USERNAME: s.component,
        APP_DATABASE: databaseName("pi", s.component),
      });
    }
  });

  it("creates each service's user with readWrite on its own database only: the init script, run as mongosh would run it, at the first start and at every start", () => {
    for (const [values, namespace] of [
      [{}, "pi"],
      [{ config: { DATA_NAMESPACE: "care" } }, "care"],
    ] as const) {
      const rendered = render(values);
      for (const s of dataServices) {
        const name = `${RELEASE}-${s.component}-mongodb`;
        const sts = find(rendered, "StatefulSet", name);
        const c = sts.spec.template.spec.containers[0];
        // The official image runs /docker-entrypoint-initdb.d/*.js on an empty volume; the postStart
        // hook runs the same script at every start, as root over the loopback.
        expect(c.volumeMounts).toContainEqual({
          name: "init",
          mountPath: "/docker-entrypoint-initdb.d",
          readOnly: true,
        });
        expect(sts.spec.template.spec.volumes).toContainEqual({ name: "init", configMap: { name: `${name}-init` } });
        expect(c.lifecycle.postStart.exec.command.join(" ")).toContain(
          "--authenticationDatabase admin /docker-entrypoint-initdb.d/ensure-user.js",
        );
        const script = find(rendered, "ConfigMap", `${name}-init`).data["ensure-user.js"];
        const env = envOf(c) as Record<string, string>;
        const run = (existing: boolean, password = "p".repeat(40), retentionPassword = "r".repeat(40)) => {
          const calls: unknown[][] = [];
          const sibling = (db: string) => ({
            getUser: (u: string) => {
              calls.push(["getUser", db, u]);
              return existing ? { user: u } : null;
            },
            createUser: (spec: unknown) => calls.push(["createUser", db, spec]),
            updateUser: (u: string, spec: unknown) => calls.push(["updateUser", db, u, spec]),
            getRole: (r: string) => {
              calls.push(["getRole", db, r]);
              return existing ? { role: r } : null;
            },
            createRole: (spec: unknown) => calls.push(["createRole", db, spec]),
            updateRole: (r: string, spec: unknown) => calls.push(["updateRole", db, r, spec]),
          });
          const retention = env.APP_AUDIT_RETENTION_USERNAME
            ? {
                APP_AUDIT_RETENTION_USERNAME: env.APP_AUDIT_RETENTION_USERNAME,
                APP_AUDIT_RETENTION_PASSWORD: retentionPassword,
              }
            : {};
          runInNewContext(script, {
            db: {
              getSiblingDB: (d: string) => {
                calls.push(["getSiblingDB", d]);
                return sibling(d);
              },
            },
            process: {
              env: {
                APP_DATABASE: env.APP_DATABASE,
                APP_USERNAME: env.APP_USERNAME,
                APP_PASSWORD: password,
                ...(env.APP_AUDIT_DATABASE ? { APP_AUDIT_DATABASE: env.APP_AUDIT_DATABASE } : {}),
                ...retention,
              },
            },
            print: () => {},
          });
          return calls;
        };
        const db = databaseName(namespace, s.component);
        if (s.component === "auth") {
          // The audit trail's database, in production shape (mongo-java-server, which the other
          // lanes run on, enforces no roles): the service's user may only append, never change or
          // remove a record; the retention sweep's own user may only read and remove.
          const audit = databaseName(namespace, "auth_audit");
          expect(env.APP_AUDIT_DATABASE).toBe(audit);
          expect(env.APP_AUDIT_RETENTION_USERNAME).toBe("auth-audit-retention");
          expect(env.APP_AUDIT_RETENTION_PASSWORD).toEqual({
            secretKeyRef: { name: `${RELEASE}-auth-mongodb-audit-retention`, key: "mongodb-password" },
          });
          const append = [
            {
              resource: { db: audit, collection: "" },
              actions: ["find", "insert", "createCollection", "createIndex", "listIndexes", "listCollections"],
            },
          ];
          const retentionPrivileges = [{ resource: { db: audit, collection: "" }, actions: ["find", "remove"] }];
          const roles = [
            { role: "readWrite", db },
            { role: "auditAppend", db: audit },
          ];
          const retentionRoles = [{ role: "auditRetention", db: audit }];
          expect(run(false)).toEqual([
            ["getSiblingDB", audit],
            ["getRole", audit, "auditAppend"],
            ["createRole", audit, { role: "auditAppend", privileges: append, roles: [] }],
            ["getRole", audit, "auditRetention"],
            ["createRole", audit, { role: "auditRetention", privileges: retentionPrivileges, roles: [] }],
            ["getSiblingDB", db],
            ["getUser", db, s.component],
            ["createUser", db, { user: s.component, pwd: "p".repeat(40), roles }],
            ["getSiblingDB", db],
            ["getUser", db, "auth-audit-retention"],
            ["createUser", db, { user: "auth-audit-retention", pwd: "r".repeat(40), roles: retentionRoles }],
          ]);
          expect(run(true)).toEqual([
            ["getSiblingDB", audit],
            ["getRole", audit, "auditAppend"],
            ["updateRole", audit, "auditAppend", { privileges: append, roles: [] }],
            ["getRole", audit, "auditRetention"],
            ["updateRole", audit, "auditRetention", { privileges: retentionPrivileges, roles: [] }],
            ["getSiblingDB", db],
            ["getUser", db, s.component],
            ["updateUser", db, s.component, { pwd: "p".repeat(40), roles }],
            ["getSiblingDB", db],
            ["getUser", db, "auth-audit-retention"],
            ["updateUser", db, "auth-audit-retention", { pwd: "r".repeat(40), roles: retentionRoles }],
          ]);
          // The appending role cannot remove (nor change) a record; the retention role cannot add or change one.
          for (const rewrite of [
            "remove",
            "update",
            "dropCollection",
            "renameCollectionSameDB",
            "convertToCapped",
            "dropDatabase",
          ])
            expect(append[0]!.actions).not.toContain(rewrite);
          for (const write of [
            "insert",
            "update",
            "dropCollection",
            "renameCollectionSameDB",
            "convertToCapped",
            "dropDatabase",
          ])
            expect(retentionPrivileges[0]!.actions).not.toContain(write);
          expect(() => run(false, "p".repeat(40), "short")).toThrow(/at least 16/);
          continue;
        }
        expect(env.APP_AUDIT_DATABASE).toBeUndefined();
        const roles = [{ role: "readWrite", db }];
        expect(run(false)).toEqual([
          ["getSiblingDB", db],
          ["getUser", db, s.component],
          ["createUser", db, { user: s.component, pwd: "p".repeat(40), roles }],
        ]);
        expect(run(true)).toEqual([
          ["getSiblingDB", db],
          ["getUser", db, s.component],
          ["updateUser", db, s.component, { pwd: "p".repeat(40), roles }],
        ]);
        // A password that could not go into the URI as is is refused before any user is touched.
        expect(() => run(false, "short")).toThrow(/at least 16/);
        expect(() => run(false, `${"p".repeat(20)}@:/`)).toThrow(/at least 16/);
      }
    }
  });

  it("writes URIs without credentials for the stand-in (no authentication), and no database Secret", () => {
    const rendered = render({ mongodb: { standIn: { enabled: true } } });
    for (const s of dataServices) {
      const env = envOf(container(rendered, s.component));
      expect(env.MONGODB_URI).toBe(`mongodb://${RELEASE}-${s.component}-mongodb:27017/`);
      expect(env.MONGODB_PASSWORD).toBeUndefined();
      expect(find(rendered, "Secret", `${RELEASE}-${s.component}-mongodb`)).toBeUndefined();
      expect(find(rendered, "Secret", `${RELEASE}-${s.component}-mongodb-user`)).toBeUndefined();
      expect(
        find(rendered, "StatefulSet", `${RELEASE}-${s.component}-mongodb`).spec.template.spec.containers[0].lifecycle,
      ).toBeUndefined();
    }
  });

  it("takes the database passwords from Secrets of the operator's: the service's from one, root's from another", () => {
    const rendered = render({
      connection: {
        mongodb: {
          auth: {
            rootExistingSecret: "my-root",
            rootExistingSecretKey: "pw",
            existingSecret: "my-conn",
            existingSecretKey: "password",
          },
        },
      },
    });
    expect(find(rendered, "Secret", `${RELEASE}-connection-mongodb`)).toBeUndefined();
    expect(find(rendered, "Secret", `${RELEASE}-connection-mongodb-user`)).toBeUndefined();
    expect(envOf(container(rendered, "connection")).MONGODB_PASSWORD).toEqual({
      secretKeyRef: { name: "my-conn", key: "password" },
    });
    const mongod = envOf(
      find(rendered, "StatefulSet", `${RELEASE}-connection-mongodb`).spec.template.spec.containers[0],
    );
    expect(mongod.MONGO_INITDB_ROOT_PASSWORD).toEqual({ secretKeyRef: { name: "my-root", key: "pw" } });
    expect(mongod.APP_PASSWORD).toEqual({ secretKeyRef: { name: "my-conn", key: "password" } });
    expect(chart.checkReferences(rendered, { externalSecrets: ["my-root", "my-conn"] })).toEqual([]);
  });

  it("runs Kafka in KRaft mode (apache/kafka:3.9.1, combined broker and controller) with SASL/SCRAM and ACLs, its kafka-setup container creating the topics and the ACLs", () => {
    const kafka = find(docs, "StatefulSet", `${RELEASE}-kafka`);
    const [broker, setup] = kafka.spec.template.spec.containers;
    expect(broker.image).toBe("apache/kafka:3.9.1");
    const config = find(docs, "ConfigMap", `${RELEASE}-kafka-config`);
    const properties: string = config.data["server.properties"];
    expect(properties).toContain("process.roles=broker,controller");
    expect(properties).toContain(
      `controller.quorum.voters=0@${RELEASE}-kafka-0.${RELEASE}-kafka-headless.${chart.NAMESPACE}.svc:9093`,
    );
    // Every listener authenticates; nothing is allowed without an ACL; only admin is a super user.
    expect(properties).toContain("listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,CLIENT:SASL_PLAINTEXT");
    expect(properties).not.toMatch(/PLAINTEXT:PLAINTEXT|:\/\/.*PLAINTEXT:/);
    expect(properties).toContain("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer");
    expect(properties).toContain("allow.everyone.if.no.acl.found=false");
    expect(properties).toContain("super.users=User:admin\n");
    // Users created at format time: the super user and exactly the users of kafka-access.ts.
    expect(config.data["start.sh"]).toContain(`for user in admin ${KAFKA_USERS.join(" ")}; do`);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's variables, not a template
    expect(config.data["start.sh"]).toContain('--add-scram "SCRAM-SHA-256=[name=${user},password=${!var}]"');
    const secret = find(docs, "Secret", `${RELEASE}-kafka-users`);
    expect(Object.keys(secret.data).sort()).toEqual(["admin", ...KAFKA_USERS].sort());
    expect(
      Object.values(secret.data).every((v) => /^[A-Za-z0-9]{32}$/.test(Buffer.from(v as string, "base64").toString())),
    ).toBe(true);
    expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    // Each service as its own user; the super user only in the Kafka pod.
    for (const user of KAFKA_USERS) {
      const env = envOf(container(docs, user));
      expect(env.KAFKA_USERNAME).toBe(user);
      expect(env.KAFKA_PASSWORD).toEqual({ secretKeyRef: { name: `${RELEASE}-kafka-users`, key: user } });
    }
    expect(setup.command).toEqual(["node", "services/ops/dist/kafka-setup.js", "--stay"]);
    expect(envOf(setup)).toMatchObject({
      KAFKA_BROKERS: "127.0.0.1:9092",
      KAFKA_USERNAME: "admin",
      DATA_NAMESPACE: "pi",
      KAFKA_PASSWORD: { secretKeyRef: { name: `${RELEASE}-kafka-users`, key: "admin" } },
    });
    expect(byKind(docs, "Job")).toEqual([]);
    // Generated under the one rule (pi.mayGenerate), never while the formatted Kafka is there.
    const template = readFileSync(join(chart.chartDir, "templates", "secrets.yaml"), "utf8");
    expect(template).toContain(
      '"hint" "kafka.auth.existingSecret" "witnesses" (list (list "apps/v1" "StatefulSet" (include "pi.name" $ctx)))',
    );
  });

  it("with an external Kafka: a hook Job creates the four topics, following DATA_NAMESPACE; the services authenticate only with kafka.auth.existingSecret", () => {
    const external = render({
      kafka: { external: { brokers: "kafka.example:9092" } },
      config: { DATA_NAMESPACE: "care" },
    });
    const job = byKind(external, "Job")[0];
    expect(job.metadata.annotations["helm.sh/hook"]).toBe("post-install,post-upgrade");
    const script: string = job.spec.template.spec.containers[0].command.join(" ");
    for (const [topic, partitions] of [
      ["care.connection-events", 3],
      ["care.file-events", 3],
      ["care.partner-events", 1],
      ["care.audit-events", 3],
    ] as const) {
      expect(script).toContain(`--create --if-not-exists --topic "${topic}" --partitions ${partitions}`);
    }
    expect(script).not.toContain('"pi.');
    expect(envOf(container(external, "auth")).KAFKA_USERNAME).toBeUndefined();
    const withUsers = render({
      kafka: { external: { brokers: "kafka.example:9092" }, auth: { existingSecret: "my-kafka-users" } },
    });
    expect(envOf(container(withUsers, "webhook")).KAFKA_PASSWORD).toEqual({
      secretKeyRef: { name: "my-kafka-users", key: "webhook" },
    });
    expect(byKind(withUsers, "Job")).toEqual([]);
  });

  it("follows DATA_NAMESPACE in the topics and ACLs the Kafka pod sets up", () => {
    const setup = find(render({ config: { DATA_NAMESPACE: "care" } }), "StatefulSet", `${RELEASE}-kafka`).spec.template
      .spec.containers[1];
    expect(envOf(setup).DATA_NAMESPACE).toBe("care");
  });

  it("generates a 48-character CREDENTIAL_PEPPER for auth only, kept across upgrades (lookup) and on uninstall", () => {
    const secret = find(docs, "Secret", `${RELEASE}-credential-pepper`);
    expect(Buffer.from(secret.data.CREDENTIAL_PEPPER, "base64").toString()).toMatch(/^[A-Za-z0-9]{48}$/);
    expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    expect(envOf(container(docs, "auth")).CREDENTIAL_PEPPER).toEqual({
      secretKeyRef: { name: `${RELEASE}-credential-pepper`, key: "CREDENTIAL_PEPPER" },
    });
    const template = readFileSync(join(chart.chartDir, "templates", "secrets.yaml"), "utf8");
    expect(template).toMatch(/lookup "v1" "Secret" \.Release\.Namespace \$name/);
    expect(template).toContain("randAlphaNum 48");
  });

  it("gives every workload (the services and the operator CLI's pod) an Ed25519 identity key of its own, generated at install, kept across upgrades (lookup) and on uninstall", async () => {
    const keysOf = (rendered: K8sObject[]) =>
      parsePublicKeys(find(rendered, "ConfigMap", `${RELEASE}-service-identity`).data.SERVICE_IDENTITY_PUBLIC_KEYS);
    const publicKeys = keysOf(docs);
    expect([...publicKeys.keys()].sort()).toEqual([
      "auth",
      "connection",
      "extraction",
      "file-intake",
      "gateway",
      "ops",
      "webhook",
    ]);
    const kids = new Set<string>();
    for (const component of ["gateway", "auth", "connection", "file-intake", "extraction", "webhook", "ops"]) {
      const secret = find(docs, "Secret", `${RELEASE}-${component}-identity`);
      expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
      const own = parseOwnIdentity(Buffer.from(secret.data.SERVICE_IDENTITY_KEY, "base64").toString());
      expect(own.name).toBe(component);
      // The ConfigMap's public key is this Secret's: a token the workload signs verifies.
      expect(publicKeys.get(own.name)!.has(own.kid)).toBe(true);
      const token = await new TokenMinter(own).token(component === "auth" ? "connection" : "auth");
      expect(await new TokenVerifier(component === "auth" ? "connection" : "auth", publicKeys).verify(token)).toBe(
        component,
      );
      kids.add(own.kid);
      // Only its own key reaches the workload.
      const env = envOf(
        component === "ops"
          ? find(docs, "Deployment", `${RELEASE}-ops`).spec.template.spec.containers[0]
          : container(docs, component),
      );
      expect(env.SERVICE_IDENTITY_KEY).toEqual({
        secretKeyRef: { name: `${RELEASE}-${component}-identity`, key: "SERVICE_IDENTITY_KEY" },
      });
      expect(env.SERVICE_IDENTITY_PUBLIC_KEYS).toEqual({
        configMapKeyRef: { name: `${RELEASE}-service-identity`, key: "SERVICE_IDENTITY_PUBLIC_KEYS" },
      });
    }
    expect(kids.size).toBe(7);
    const template = readFileSync(join(chart.chartDir, "templates", "service-identity.yaml"), "utf8");
    expect(template).toMatch(/lookup "v1" "Secret" \$root\.Release\.Namespace \$name/);
    expect(template).toContain('genPrivateKey "ed25519"');
  });

  it("takes a workload's identity from a Secret of the operator's, with its public key given; refuses one without", () => {
    const external = generateIdentity("webhook");
    const rendered = render({
      webhook: {
        identity: {
          existingSecret: "my-webhook-key",
          existingSecretKey: "key",
          publicKey: external.publicKey.slice("webhook:".length),
        },
      },
    });
    expect(find(rendered, "Secret", `${RELEASE}-webhook-identity`)).toBeUndefined();
    expect(envOf(container(rendered, "webhook")).SERVICE_IDENTITY_KEY).toEqual({
      secretKeyRef: { name: "my-webhook-key", key: "key" },
    });
    const own = parseOwnIdentity(external.key);
    const keys = parsePublicKeys(
      find(rendered, "ConfigMap", `${RELEASE}-service-identity`).data.SERVICE_IDENTITY_PUBLIC_KEYS,
    );
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
    expect(envOf(c)).toMatchObject({
      AUTH_ADMIN_URL: `http://${RELEASE}-auth-headless:50061`,
      CONNECTION_ADMIN_URL: `http://${RELEASE}-connection-headless:50062`,
      WEBHOOK_ADMIN_URL: `http://${RELEASE}-webhook-headless:50064`,
    });
    const off = render({ ops: { enabled: false } });
    expect(find(off, "Deployment", `${RELEASE}-ops`)).toBeUndefined();
    expect(find(off, "Secret", `${RELEASE}-ops-identity`)).toBeUndefined();
    expect(find(off, "NetworkPolicy", `${RELEASE}-ops`)).toBeUndefined();
    expect(
      podComponents(find(off, "NetworkPolicy", `${RELEASE}-auth`).spec.ingress.flatMap((r: K8sObject) => r.from)),
    ).toEqual(["gateway", "webhook"]);
    // No admin caller left for connection: its admin port admits nobody (the scraper still reaches its metrics port).
    expect(find(off, "NetworkPolicy", `${RELEASE}-connection`).spec.ingress.flatMap((r: K8sObject) => r.ports)).toEqual(
      [
        { port: 50052, protocol: "TCP" },
        { port: 9464, protocol: "TCP" },
      ],
    );
  });

  it("uses a given pepper, or an existing Secret of the operator's", () => {
    const given = "p".repeat(40);
    const withValue = find(
      render({ auth: { credentialPepper: { value: given } } }),
      "Secret",
      `${RELEASE}-credential-pepper`,
    );
    expect(Buffer.from(withValue.data.CREDENTIAL_PEPPER, "base64").toString()).toBe(given);
    const external = render({
      auth: { credentialPepper: { existingSecret: "my-pepper", existingSecretKey: "pepper" } },
    });
    expect(find(external, "Secret", `${RELEASE}-credential-pepper`)).toBeUndefined();
    expect(envOf(container(external, "auth")).CREDENTIAL_PEPPER).toEqual({
      secretKeyRef: { name: "my-pepper", key: "pepper" },
    });
  });

  it("passes newer peppers (CREDENTIAL_PEPPERS) from the pepper's Secret to auth when it has them, optional, and keeps them in a generated Secret", () => {
    expect(envOf(container(docs, "auth")).CREDENTIAL_PEPPERS).toEqual({
      secretKeyRef: { name: `${RELEASE}-credential-pepper`, key: "CREDENTIAL_PEPPERS", optional: true },
    });
    const external = render({
      auth: { credentialPepper: { existingSecret: "my-pepper", existingSecretKey: "pepper" } },
    });
    expect(envOf(container(external, "auth")).CREDENTIAL_PEPPERS).toEqual({
      secretKeyRef: { name: "my-pepper", key: "CREDENTIAL_PEPPERS", optional: true },
    });
    expect(readFileSync(join(chart.chartDir, "templates", "secrets.yaml"), "utf8")).toMatch(
      /hasKey \(default dict \$existing\.data\) "CREDENTIAL_PEPPERS"/,
    );
  });

  it("generates DATA_KEYS (one key k1 of 32 random bytes) for auth and file-intake only, kept across upgrades (lookup) and on uninstall", () => {
    const secret = find(docs, "Secret", `${RELEASE}-data-keys`);
    const value = Buffer.from(secret.data.DATA_KEYS, "base64").toString();
    expect(value).toMatch(/^k1:[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(value.slice(3), "base64")).toHaveLength(32);
    expect(secret.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    for (const s of SERVICES) {
      const ref = envOf(container(docs, s.component)).DATA_KEYS;
      if (s.key === "auth" || s.key === "fileIntake")
        expect(ref).toEqual({ secretKeyRef: { name: `${RELEASE}-data-keys`, key: "DATA_KEYS" } });
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
    expect(
      find(
        render({ dataKeys: { existingSecret: "my-keys" }, kafka: { auth: { existingSecret: "my-kafka-users" } } }, [
          "--is-upgrade",
        ]),
        "Secret",
        `${RELEASE}-data-keys`,
      ),
    ).toBeUndefined();
  });

  it("uses given DATA_KEYS or an existing Secret of the operator's; with generate=false (GitOps) a render without them fails", () => {
    const given = `k2:${Buffer.alloc(32, 2).toString("base64url")},k1:${Buffer.alloc(32, 1).toString("base64")}`;
    const withValue = find(render({ dataKeys: { value: given } }), "Secret", `${RELEASE}-data-keys`);
    expect(Buffer.from(withValue.data.DATA_KEYS, "base64").toString()).toBe(given);
    const external = render({ dataKeys: { existingSecret: "my-keys", existingSecretKey: "keys" } });
    expect(find(external, "Secret", `${RELEASE}-data-keys`)).toBeUndefined();
    expect(envOf(container(external, "file-intake")).DATA_KEYS).toEqual({
      secretKeyRef: { name: "my-keys", key: "keys" },
    });
    const strict = chart.helmTemplate(helm, { dataKeys: { generate: false } });
    expect(strict.code).not.toBe(0);
    expect(strict.stderr).toMatch(/dataKeys: set dataKeys.existingSecret/);
  });

  it("probes the internal services with native gRPC health checks (liveness and traffic service names: Kafka in neither) and the gateway on /healthz and /readyz/traffic", () => {
    for (const s of SERVICES.filter((x) => x.key !== "gateway")) {
      const c = container(docs, s.component);
      const port = c.ports[0].containerPort;
      expect(c.livenessProbe.grpc).toEqual({ port, service: "liveness" });
      expect(c.readinessProbe.grpc).toEqual({ port, service: "traffic" });
      expect(c.startupProbe.grpc).toEqual({ port });
    }
    const gw = container(docs, "gateway");
    expect(gw.livenessProbe.httpGet).toMatchObject({ path: "/healthz", port: "http" });
    expect(gw.readinessProbe.httpGet).toMatchObject({ path: "/readyz/traffic", port: "http" });
  });

  it("denies all traffic of the release's pods, then admits only each component's named callers, each to the port of its plane", () => {
    const policy = (component: string) => find(docs, "NetworkPolicy", `${RELEASE}-${component}`)!.spec;
    const denyAll = policy("deny-all");
    expect(denyAll.policyTypes).toEqual(["Ingress", "Egress"]);
    expect(denyAll.ingress).toBeUndefined();
    expect(denyAll.egress).toBeUndefined();
    // Per port: the data plane's callers, then the admin plane's (the gateway never among them).
    // Last, the metrics port: the scraper's, which is no pod of the release (networkPolicy.metricsScraper).
    const callers: Record<string, [number, string[]][]> = {
      auth: [
        [50051, ["gateway"]],
        [50061, ["ops", "webhook"]],
        [9464, []],
      ],
      connection: [
        [50052, ["file-intake", "gateway"]],
        [50062, ["ops"]],
        [9464, []],
      ],
      "file-intake": [
        [50053, ["extraction", "gateway"]],
        [9464, []],
      ],
      webhook: [
        [50054, ["gateway"]],
        [50064, ["ops"]],
        [9464, []],
      ],
      // A worker: nobody calls it, the scraper alone reaches it.
      extraction: [[9464, []]],
    };
    for (const [component, expected] of Object.entries(callers)) {
      expect(
        policy(component).ingress.map((r: K8sObject) => [
          r.ports.map((p: K8sObject) => p.port)[0],
          podComponents(r.from),
        ]),
      ).toEqual(expected);
    }
    for (const component of ["gateway", ...Object.keys(callers)]) {
      const scraper = policy(component).ingress.at(-1);
      expect(scraper).toEqual({
        from: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } },
            podSelector: { matchLabels: { "app.kubernetes.io/name": "prometheus" } },
          },
        ],
        ports: [{ port: 9464, protocol: "TCP" }],
      });
    }
    const gatewayFrom = policy("gateway").ingress[0].from[0];
    expect(gatewayFrom.namespaceSelector.matchLabels).toEqual({ "kubernetes.io/metadata.name": "ingress-nginx" });
    // The gateway calls auth, connection and file-intake, and checks the webhook service's health
    // for /readyz; the operator CLI has a pod of its own, which nothing may reach.
    expect(podComponents(policy("gateway").egress.flatMap((r: K8sObject) => r.to ?? []))).toEqual([
      "auth",
      "connection",
      "file-intake",
      "kafka",
      "webhook",
    ]);
    expect(policy("ops").ingress).toEqual([]);
    // Extraction: nobody calls it (the scraper alone reaches its metrics port, above); it calls file-intake's data port and reads Kafka.
    expect(policy("extraction").ingress.flatMap((r: K8sObject) => r.ports)).toEqual([{ port: 9464, protocol: "TCP" }]);
    expect(podComponents(policy("extraction").egress.flatMap((r: K8sObject) => r.to ?? []))).toEqual([
      "file-intake",
      "kafka",
    ]);
    expect(podComponents(policy("ops").egress.flatMap((r: K8sObject) => r.to ?? []))).toEqual([
      "auth",
      "connection",
      "webhook",
    ]);
    expect(
      policy("ops")
        .egress.flatMap((r: K8sObject) => r.ports)
        .filter((p: K8sObject) => p.port !== 53),
    ).toEqual([
      { port: 50061, protocol: "TCP" },
      { port: 50062, protocol: "TCP" },
      { port: 50064, protocol: "TCP" },
    ]);
    // The webhook service reaches auth's admin port only (GetWebhookTarget), not its data port.
    const webhookToAuth = policy("webhook").egress.filter((r: K8sObject) => podComponents(r.to ?? []).includes("auth"));
    expect(webhookToAuth.flatMap((r: K8sObject) => r.ports)).toEqual([{ port: 50061, protocol: "TCP" }]);
    const gatewayPorts = policy("gateway")
      .egress.flatMap((r: K8sObject) => r.ports ?? [])
      .map((p: K8sObject) => p.port);
    for (const admin of [50061, 50062, 50064]) expect(gatewayPorts).not.toContain(admin);
    for (const s of dataServices) {
      expect(podComponents(policy(`${s.component}-mongodb`).ingress[0].from)).toEqual([s.component]);
      expect(policy(`${s.component}-mongodb`).egress).toEqual([]);
    }
    expect(podComponents(policy("kafka").ingress[0].from)).toEqual([
      "auth",
      "connection",
      "extraction",
      "file-intake",
      "gateway",
      "webhook",
    ]);
    const webhookInternet = policy("webhook").egress.find((r: K8sObject) => r.to?.[0]?.ipBlock);
    expect(webhookInternet.ports).toEqual([{ port: 443, protocol: "TCP" }]);
    expect(webhookInternet.to[0].ipBlock.except).toEqual(expect.arrayContaining(["10.0.0.0/8", "169.254.0.0/16"]));
  });

  it("runs extraction as a workload of its own: file-intake's image, its own entry point and memory limit, a child ceiling that fits it", () => {
    const dep = find(docs, "Deployment", `${RELEASE}-extraction`);
    const c = dep.spec.template.spec.containers[0];
    expect(c.image).toMatch(/^partner-integration\/file-intake:/);
    expect(c.command).toEqual(["node", "services/extraction/dist/main.js"]);
    expect(c.resources.limits.memory).toBe("768Mi");
    expect(envOf(c).EXTRACTION_MEMORY_CEILING_MB).toBe("512");
    expect(envOf(c).DATA_KEYS).toBeUndefined();
    expect(envOf(c).MONGODB_URI).toBeUndefined();
    const tooBig = chart.helmTemplate(helm, { config: { EXTRACTION_MEMORY_CEILING_MB: 700 } });
    expect(tooBig.code).not.toBe(0);
    expect(tooBig.stderr).toContain(
      "EXTRACTION_MEMORY_CEILING_MB (700) plus 128 MiB for the extraction process must fit extraction.resources.limits.memory (768Mi)",
    );
    expect(
      chart.helmTemplate(helm, {
        config: { EXTRACTION_MEMORY_CEILING_MB: 1500 },
        extraction: { resources: { limits: { memory: "2Gi" } } },
      }).code,
    ).toBe(0);
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
    expect(notes).toContain(
      `kubectl -n ${chart.NAMESPACE} exec deploy/${RELEASE}-ops -- node services/ops/dist/main.js info --json`,
    );
    expect(notes).not.toContain(`exec deploy/${RELEASE}-gateway`);
    expect(notes).toContain(`${RELEASE}-ops-identity`);
    expect(notes).toContain(`${RELEASE}-credential-pepper`);
    expect(notes).toContain(`${RELEASE}-data-keys`);
    expect(notes).toContain(`${RELEASE}-auth-mongodb-user`);
    expect(notes).toContain(`${RELEASE}-gateway-tls`);
    expect(notes).toContain(`get secret ${RELEASE}-gateway-tls -o jsonpath='{.data.ca\\.crt}'`);
    expect(notes).toContain(`port-forward svc/${RELEASE}-gateway`);
    // The only warning: these checks render with generateSecrets "always" (see chart.mjs).
    expect(notes.match(/WARNING: .*/g)).toEqual([expect.stringMatching(/^WARNING: generateSecrets is "always"/)]);
    const relaxed = chart.renderNotes(helm, {
      ingress: { enabled: false },
      networkPolicy: { enabled: false },
      config: { WEBHOOK_ALLOW_INSECURE_URLS: true },
    });
    expect(relaxed).toContain(`port-forward svc/${RELEASE}-gateway`);
    expect(relaxed).toMatch(/WARNING: networkPolicy.enabled is false/);
    expect(relaxed).toMatch(/WARNING: config.WEBHOOK_ALLOW_INSECURE_URLS is true/);
  });

  it("renders the same objects twice, apart from the generated secrets", () => {
    const generated = (o: K8sObject) =>
      o.kind === "Secret" || (o.kind === "ConfigMap" && o.metadata.name === `${RELEASE}-service-identity`);
    // A generated certificate's Secret also notes its expiry (seconds since the epoch) in an annotation.
    const strip = (objs: K8sObject[]) =>
      objs.map((o) =>
        generated(o)
          ? {
              ...o,
              metadata: { ...o.metadata, annotations: Object.keys(o.metadata.annotations ?? {}) },
              data: Object.keys(o.data ?? {}),
            }
          : o,
      );
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

describe('the ingress: HTTPS by default, the partner API\'s paths only (docs/security.md, "TLS on the ingress")', () => {
  const ingressOf = (docs: K8sObject[], name = `${RELEASE}-gateway`) => find(docs, "Ingress", name);
  const pathsOf = (ing: K8sObject) => ing.spec.rules[0].http.paths.map((p: K8sObject) => `${p.pathType} ${p.path}`);
  const secretText = (secret: K8sObject, key: string) => Buffer.from(secret.data[key], "base64").toString();

  it("routes POST /oauth/token, /v1/... and the public API reference only: never /healthz or /readyz (which stay the pods' probes)", () => {
    const docs = render();
    expect(pathsOf(ingressOf(docs))).toEqual([
      "Exact /oauth/token",
      "Prefix /v1/",
      "Exact /openapi.yaml",
      "Exact /openapi.json",
      "Prefix /docs",
    ]);
    expect(pathsOf(ingressOf(render({ ingress: { docs: false } })))).toEqual(["Exact /oauth/token", "Prefix /v1/"]);
    // What each path admits, by the Ingress path-matching rules (Exact: the whole path; Prefix: whole segments).
    const routed = (path: string) =>
      ingressOf(docs).spec.rules[0].http.paths.some((p: K8sObject) =>
        p.pathType === "Exact"
          ? p.path === path
          : path === p.path.replace(/\/$/, "") || path.startsWith(p.path.endsWith("/") ? p.path : `${p.path}/`),
      );
    for (const path of [
      "/oauth/token",
      "/v1/connections",
      "/v1/connections/con_1",
      "/v1/files",
      "/v1/files/fil_1",
      "/openapi.json",
      "/docs",
      "/docs/swagger-ui.css",
    ])
      expect([path, routed(path)]).toEqual([path, true]);
    for (const path of ["/readyz", "/readyz/traffic", "/healthz", "/", "/metrics", "/oauth/token/x", "/v2/files"])
      expect([path, routed(path)]).toEqual([path, false]);
    // The gateway's own routes the ingress leaves out are exactly its probes.
    const app = readFileSync(
      join(chart.chartDir, "..", "..", "services", "gateway", "src", "routes", "health.ts"),
      "utf8",
    );
    expect(app).toContain('router.get("/readyz"');
  });

  it("serves HTTPS by default with a certificate the chart generates once: a CA of its own signs it for ingress.host and the extra names; kept across upgrades and on uninstall", () => {
    const docs = render({
      ingress: {
        host: "partner-api.example.com",
        https: { selfSigned: { altNames: ["api.example.com"], ipAddresses: ["10.97.0.80"] } },
      },
    });
    const ing = ingressOf(docs);
    expect(ing.spec.tls).toEqual([{ secretName: `${RELEASE}-gateway-tls`, hosts: ["partner-api.example.com"] }]);
    const tls = find(docs, "Secret", `${RELEASE}-gateway-tls`);
    const ca = find(docs, "Secret", `${RELEASE}-ingress-ca`);
    expect(tls.type).toBe("kubernetes.io/tls");
    for (const s of [tls, ca]) expect(s.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    const cert = new X509Certificate(secretText(tls, "tls.crt"));
    const caCert = new X509Certificate(secretText(tls, "ca.crt"));
    expect(secretText(ca, "tls.crt")).toBe(secretText(tls, "ca.crt"));
    expect(caCert.ca).toBe(true);
    expect(cert.ca).toBe(false);
    expect(cert.verify(caCert.publicKey)).toBe(true);
    expect(cert.checkIssued(caCert)).toBe(true);
    expect(cert.subjectAltName).toBe("DNS:partner-api.example.com, DNS:api.example.com, IP Address:10.97.0.80");
    expect(cert.checkHost("partner-api.example.com")).toBe("partner-api.example.com");
    expect(cert.checkPrivateKey(createPrivateKey(secretText(tls, "tls.key")))).toBe(true);
    const days = (Date.parse(cert.validTo) - Date.now()) / 86400_000;
    expect(days).toBeGreaterThan(390);
    expect(days).toBeLessThan(398);
    // The CA's key stays in its own Secret: the ingress's Secret holds only the CA's certificate.
    expect(Object.keys(tls.data).sort()).toEqual(["ca.crt", "tls.crt", "tls.key"]);
    const template = readFileSync(join(chart.chartDir, "templates", "ingress.yaml"), "utf8");
    expect(template).toMatch(/lookup "v1" "Secret" \.Release\.Namespace \$tlsSecret/);
    expect(template).toMatch(/lookup "v1" "Secret" \.Release\.Namespace \$caName/);
    expect(template).toContain("genSignedCertWithKey");
    for (const key of [secretText(tls, "tls.key"), secretText(ca, "tls.key")])
      expect(createPrivateKey(key).asymmetricKeyDetails).toEqual({ namedCurve: "prime256v1" });
  });

  it("redirects plain HTTP to HTTPS: ingress-nginx by its annotations, Traefik by the HTTPS entry point (and a redirect Middleware when its CRDs are served)", () => {
    const nginx = ingressOf(render()).metadata.annotations;
    expect(nginx).toMatchObject({
      "nginx.ingress.kubernetes.io/ssl-redirect": "true",
      "nginx.ingress.kubernetes.io/force-ssl-redirect": "true",
    });
    const traefikDocs = render({ ingress: { className: "traefik" } });
    const traefik = ingressOf(traefikDocs).metadata.annotations;
    expect(traefik).toEqual({
      "traefik.ingress.kubernetes.io/router.tls": "true",
      "traefik.ingress.kubernetes.io/router.entrypoints": "websecure",
    });
    expect(byKind(traefikDocs, "Ingress")).toHaveLength(1);
    // With Traefik's CRDs: a second Ingress on the HTTP entry point, through a redirectScheme Middleware.
    const withCrds = chart.helmTemplate(
      helm,
      { ingress: { className: "traefik" } },
      { extraArgs: ["--api-versions", "traefik.io/v1alpha1/Middleware"] },
    );
    expect(withCrds.code).toBe(0);
    const middleware = find(withCrds.docs, "Middleware", `${RELEASE}-gateway-https-redirect`);
    expect(middleware.spec).toEqual({ redirectScheme: { scheme: "https", permanent: true } });
    const http = ingressOf(withCrds.docs, `${RELEASE}-gateway-http`);
    expect(http.metadata.annotations).toEqual({
      "traefik.ingress.kubernetes.io/router.entrypoints": "web",
      "traefik.ingress.kubernetes.io/router.middlewares": `${chart.NAMESPACE}-${RELEASE}-gateway-https-redirect@kubernetescrd`,
    });
    expect(pathsOf(http)).toEqual(pathsOf(ingressOf(withCrds.docs)));
    expect(http.spec.tls).toBeUndefined();
    // Another controller: the chart adds none of these; ingress.controller names one explicitly.
    const other = ingressOf(render({ ingress: { className: "haproxy" } }));
    expect(other.metadata.annotations).toBeUndefined();
    expect(other.spec.tls).toEqual([{ secretName: `${RELEASE}-gateway-tls` }]);
    expect(
      ingressOf(render({ ingress: { className: "public-nginx", controller: "nginx" } })).metadata.annotations[
        "nginx.ingress.kubernetes.io/force-ssl-redirect"
      ],
    ).toBe("true");
    expect(
      ingressOf(render({ ingress: { https: { redirect: false } } })).metadata.annotations[
        "nginx.ingress.kubernetes.io/force-ssl-redirect"
      ],
    ).toBeUndefined();
  });

  it("asks cert-manager for the certificate when an Issuer or ClusterIssuer is named, and generates none", () => {
    for (const [certManager, annotation] of [
      [{ clusterIssuer: "letsencrypt" }, "cert-manager.io/cluster-issuer"],
      [{ issuer: "internal-ca" }, "cert-manager.io/issuer"],
    ] as const) {
      const docs = render({ ingress: { host: "partner-api.example.com", https: { certManager } } });
      const ing = ingressOf(docs);
      expect(ing.metadata.annotations[annotation]).toBe(Object.values(certManager)[0]);
      expect(ing.spec.tls).toEqual([{ secretName: `${RELEASE}-gateway-tls`, hosts: ["partner-api.example.com"] }]);
      expect(find(docs, "Secret", `${RELEASE}-gateway-tls`)).toBeUndefined();
      expect(find(docs, "Secret", `${RELEASE}-ingress-ca`)).toBeUndefined();
    }
    const noHost = chart.helmTemplate(helm, { ingress: { https: { certManager: { clusterIssuer: "letsencrypt" } } } });
    expect(noHost.code).not.toBe(0);
    expect(noHost.stderr).toContain("ingress.host is required with ingress.https.certManager");
    const both = chart.helmTemplate(helm, {
      ingress: { host: "a.example.com", https: { certManager: { clusterIssuer: "a", issuer: "b" } } },
    });
    expect(both.stderr).toContain("set clusterIssuer or issuer, not both");
  });

  it("takes a certificate Secret of the operator's (existingSecret), or spec.tls entries given as they are", () => {
    const docs = render({
      ingress: { host: "partner-api.example.com", https: { existingSecret: "partner-api-cert" } },
    });
    expect(ingressOf(docs).spec.tls).toEqual([{ secretName: "partner-api-cert", hosts: ["partner-api.example.com"] }]);
    expect(byKind(docs, "Secret").map((x: K8sObject) => x.metadata.name)).not.toEqual(
      expect.arrayContaining([`${RELEASE}-gateway-tls`]),
    );
    const own = [{ secretName: "mine", hosts: ["a.example.com"] }];
    const given = render({ ingress: { tls: own } });
    expect(ingressOf(given).spec.tls).toEqual(own);
    expect(find(given, "Secret", `${RELEASE}-gateway-tls`)).toBeUndefined();
  });

  it("serves plain HTTP only when told to (ingress.https.enabled=false), and NOTES warn then", () => {
    const docs = render({ ingress: { https: { enabled: false } } });
    expect(ingressOf(docs).spec.tls).toBeUndefined();
    expect(ingressOf(docs).metadata.annotations["nginx.ingress.kubernetes.io/ssl-redirect"]).toBeUndefined();
    expect(find(docs, "Secret", `${RELEASE}-gateway-tls`)).toBeUndefined();
    expect(chart.renderNotes(helm, { ingress: { https: { enabled: false } } })).toMatch(
      /WARNING: ingress.https.enabled is false: the partner API .* travels over plain HTTP/,
    );
    expect(chart.renderNotes(helm, { ingress: { https: { redirect: false } } })).toMatch(
      /WARNING: ingress.https.redirect is false/,
    );
    expect(chart.renderNotes(helm, {})).not.toMatch(/WARNING: ingress/);
  });
});

describe('generated secrets under GitOps rendering (generateSecrets; docs/security.md, "Generated secrets")', () => {
  const externalIdentity = (key: string) => {
    const id = generateIdentity((chart.SERVICES.find((s) => s.key === key)?.component as "auth") ?? "ops");
    return { existingSecret: `my-${key}-identity`, publicKey: id.publicKey.slice(id.publicKey.indexOf(":") + 1) };
  };
  // Every generated secret given as a Secret of the operator's (what a GitOps install brings, e.g.
  // through sealed-secrets or external-secrets).
  const allGiven = {
    generateSecrets: "auto",
    auth: { credentialPepper: { existingSecret: "my-pepper" }, identity: externalIdentity("auth") },
    dataKeys: { existingSecret: "my-data-keys" },
    gateway: { identity: externalIdentity("gateway") },
    extraction: { identity: externalIdentity("extraction") },
    ops: { identity: externalIdentity("ops") },
    ...Object.fromEntries(
      ["connection", "fileIntake", "webhook"].map((k) => [
        k,
        {
          identity: externalIdentity(k),
          mongodb: { auth: { rootExistingSecret: `my-${k}-root`, existingSecret: `my-${k}-db` } },
        },
      ]),
    ),
    ingress: { host: "partner-api.example.com", https: { existingSecret: "my-tls" } },
    kafka: { auth: { existingSecret: "my-kafka-users" } },
  };
  (allGiven.auth as K8sObject).mongodb = {
    auth: {
      rootExistingSecret: "my-auth-root",
      existingSecret: "my-auth-db",
      auditRetentionExistingSecret: "my-auth-audit-retention",
    },
  };

  it("fails a render without a cluster (helm template, lint, GitOps tools) instead of generating, naming every value that needs a Secret", () => {
    for (const values of [
      { generateSecrets: "auto" },
      {
        generateSecrets: "auto",
        dataKeys: { existingSecret: "k" },
        auth: { credentialPepper: { existingSecret: "p" } },
      },
    ]) {
      const t = chart.helmTemplate(helm, values);
      expect(t.code).not.toBe(0);
      expect(t.stderr).toMatch(/cannot be generated: this render has no cluster to look the existing one up in/);
      expect(t.stderr).toContain("gateway.identity.existingSecret (with publicKey)");
      expect(t.stderr).toContain("webhook.mongodb.auth.rootExistingSecret");
      expect(t.stderr).toContain("auth.mongodb.auth.auditRetentionExistingSecret");
      expect(t.stderr).toContain("ingress.https.existingSecret (or ingress.https.certManager)");
      expect(t.stderr).toContain("kafka.auth.existingSecret");
      // helm lint only reports a template's fail (lint mode), and passes: it deploys nothing.
      expect(chart.helmLint(helm, values).output).toMatch(
        /\[INFO\] Fail: .*cannot be generated: this render has no cluster/,
      );
    }
    expect(chart.helmTemplate(helm, { generateSecrets: "auto" }).stderr).toContain(
      "auth.credentialPepper.existingSecret, dataKeys.existingSecret",
    );
  });

  it("renders without a cluster when every secret is given, and then generates none", () => {
    const t = chart.helmTemplate(helm, allGiven);
    expect(t.stderr).toBe("");
    expect(t.code).toBe(0);
    expect(byKind(t.docs, "Secret")).toEqual([]);
    const given = Object.values(allGiven).flatMap(function names(v: unknown): string[] {
      if (!v || typeof v !== "object") return [];
      return Object.entries(v).flatMap(([k, x]) =>
        /existingSecret$/i.test(k) && typeof x === "string" ? [x] : names(x),
      );
    });
    expect(chart.checkReferences(t.docs, { externalSecrets: given })).toEqual([]);
    // The same with a certificate from cert-manager instead of a Secret of the operator's.
    expect(
      chart.helmTemplate(helm, {
        ...allGiven,
        ingress: { host: "partner-api.example.com", https: { certManager: { clusterIssuer: "letsencrypt" } } },
      }).code,
    ).toBe(0);
  });

  it("generates nothing with generateSecrets=never, even where it could ask a cluster", () => {
    const t = chart.helmTemplate(helm, { generateSecrets: "never" });
    expect(t.code).not.toBe(0);
    expect(t.stderr).toMatch(/generateSecrets is "never" and none is given/);
    expect(chart.helmTemplate(helm, { ...allGiven, generateSecrets: "never" }).code).toBe(0);
  });

  it("generates in a render against the cluster only when nothing that depends on the secret is there (the template's rule)", () => {
    const helpers = readFileSync(join(chart.chartDir, "templates", "_helpers.tpl"), "utf8");
    // Cluster reachable: a list of the namespace's Secrets is an object; without a cluster, an empty map.
    expect(helpers).toContain('lookup "v1" "Secret" .Release.Namespace ""');
    expect(helpers).toMatch(/refusing to generate a new one \(it would be locked out\)/);
    const mongodb = readFileSync(join(chart.chartDir, "templates", "mongodb.yaml"), "utf8");
    expect(mongodb).toContain('(list "v1" "PersistentVolumeClaim" (printf "data-%s-0" $name))');
    const secrets = readFileSync(join(chart.chartDir, "templates", "secrets.yaml"), "utf8");
    // The pepper, DATA_KEYS and the Kafka users.
    expect(secrets.match(/include "pi.mayGenerate"/g)).toHaveLength(3);
    for (const file of ["service-identity.yaml", "ingress.yaml"])
      expect(readFileSync(join(chart.chartDir, "templates", file), "utf8")).toContain('include "pi.mayGenerate"');
    // Root's, the service user's, and the auth audit retention user's.
    expect(mongodb.match(/include "pi.mayGenerate"/g)).toHaveLength(3);
  });
});

describe("metrics (docs/operations.md): a port of every process, ServiceMonitors, a PrometheusRule, a dashboard", () => {
  const allOn = chart.valuesFor({ metrics: true, httpRoute: true, ingress: true, networkPolicy: true });
  let docs: K8sObject[];
  beforeAll(() => {
    docs = render(allOn);
  });

  it("gives every service's pod and ClusterIP Service a port named metrics (METRICS_PORT), the headless Services none, the ops pod none (its one port is its probes')", () => {
    expect(SERVICES.map((s) => s.key)).toContain("extraction");
    for (const s of SERVICES) {
      const c = container(docs, s.component);
      expect([s.component, c.ports.find((p: K8sObject) => p.name === "metrics")]).toEqual([
        s.component,
        { name: "metrics", containerPort: 9464, protocol: "TCP" },
      ]);
      expect(envOf(c).METRICS_PORT).toBe("9464");
      // A worker (extraction) has no Service: a PodMonitor scrapes its pods.
      if (s.key === "extraction") continue;
      expect(find(docs, "Service", `${RELEASE}-${s.component}`).spec.ports).toContainEqual({
        name: "metrics",
        port: 9464,
        targetPort: "metrics",
        protocol: "TCP",
      });
      const headless = find(docs, "Service", `${RELEASE}-${s.component}-headless`);
      if (headless) expect(headless.spec.ports.map((p: K8sObject) => p.name)).not.toContain("metrics");
    }
    // The ops pod has only the port of its own probes.
    expect((container(docs, "ops").ports ?? []).map((p: K8sObject) => p.name)).toEqual(["probes"]);
    const moved = render({ config: { METRICS_PORT: 9100 } });
    expect(container(moved, "auth").ports.find((p: K8sObject) => p.name === "metrics").containerPort).toBe(9100);
    expect(find(moved, "NetworkPolicy", `${RELEASE}-auth`).spec.ingress.at(-1).ports).toEqual([
      { port: 9100, protocol: "TCP" },
    ]);
  });

  it("renders none of the Prometheus Operator's objects, the dashboard or Gateway API objects by default", () => {
    const defaults = render();
    for (const kind of ["ServiceMonitor", "PrometheusRule", "Gateway", "HTTPRoute"])
      expect([kind, byKind(defaults, kind)]).toEqual([kind, []]);
    expect(find(defaults, "ConfigMap", `${RELEASE}-dashboard`)).toBeUndefined();
  });

  it("validates the ServiceMonitors, the PodMonitor, the PrometheusRule, the Gateway and the HTTPRoutes against their CRDs' schemas (deploy/crds), every other object against Kubernetes'", async () => {
    for (const kind of ["ServiceMonitor", "PodMonitor", "PrometheusRule", "Gateway", "HTTPRoute"])
      expect([kind, byKind(docs, kind).length > 0]).toEqual([kind, true]);
    expect(await chart.validateSchemas(docs)).toEqual([]);
    expect(chart.checkReferences(docs)).toEqual([]);
  });

  it("refuses, by those schemas, a custom resource with a misspelt or mistyped field", async () => {
    const monitor = structuredClone(byKind(docs, "ServiceMonitor")[0]);
    monitor.spec.endpoints[0].intervall = "30s";
    const rule = structuredClone(byKind(docs, "PrometheusRule")[0]);
    rule.spec.groups[0].rules[0].for = 5;
    const route = structuredClone(byKind(docs, "HTTPRoute")[0]);
    route.spec.rules[0].matches[0].path.type = "Prefix";
    const problems = await chart.validateSchemas([monitor, rule, route]);
    expect(problems).toEqual([
      expect.stringMatching(/^ServiceMonitor\/pi-gateway: .*intervall/),
      expect.stringMatching(/^PrometheusRule\/pi: \/spec\/groups\/0\/rules\/0\/for must be string/),
      expect.stringMatching(
        /^HTTPRoute\/pi-gateway: \/spec\/rules\/0\/matches\/0\/path\/type must be equal to one of the allowed values/,
      ),
    ]);
  });

  it("scrapes each service by a ServiceMonitor of its own (its ClusterIP Service's metrics port) and the worker by a PodMonitor under the same job name, in the release's namespace, with the labels asked for", () => {
    const monitors = byKind(docs, "ServiceMonitor");
    expect(monitors.map((m: K8sObject) => m.metadata.name).sort()).toEqual(
      SERVICES.filter((s) => s.key !== "extraction")
        .map((s) => `${RELEASE}-${s.component}`)
        .sort(),
    );
    const podMonitor = find(docs, "PodMonitor", `${RELEASE}-extraction`);
    expect(podMonitor.spec.selector.matchLabels["app.kubernetes.io/component"]).toBe("extraction");
    expect(podMonitor.spec.podMetricsEndpoints).toEqual([
      {
        port: "metrics",
        path: "/metrics",
        scheme: "http",
        interval: "30s",
        honorLabels: false,
        relabelings: [{ targetLabel: "job", replacement: `${RELEASE}-extraction` }],
      },
    ]);
    expect(find(docs, "Deployment", `${RELEASE}-extraction`).spec.template.spec.containers[0].ports).toContainEqual({
      name: "metrics",
      containerPort: 9464,
      protocol: "TCP",
    });
    for (const m of monitors) {
      expect(m.spec.namespaceSelector).toEqual({ matchNames: [chart.NAMESPACE] });
      expect(m.spec.endpoints).toEqual([
        { port: "metrics", path: "/metrics", scheme: "http", interval: "30s", honorLabels: false },
      ]);
    }
    const labelled = render({
      metrics: {
        serviceMonitor: {
          enabled: true,
          labels: { release: "kube-prometheus-stack" },
          namespace: "monitoring",
          interval: "15s",
          scrapeTimeout: "10s",
        },
      },
    });
    const m = find(labelled, "ServiceMonitor", `${RELEASE}-auth`);
    expect(m.metadata).toMatchObject({ namespace: "monitoring", labels: { release: "kube-prometheus-stack" } });
    expect(m.spec.endpoints[0]).toMatchObject({ interval: "15s", scrapeTimeout: "10s" });
    expect(m.spec.namespaceSelector).toEqual({ matchNames: [chart.NAMESPACE] });
  });

  it("ships the Grafana dashboard in a ConfigMap labelled for the sidecar, its queries naming only metrics the processes export", () => {
    const cm = find(docs, "ConfigMap", `${RELEASE}-dashboard`);
    expect(cm.metadata.labels.grafana_dashboard).toBe("1");
    const dashboard = JSON.parse(cm.data["partner-integration.json"]);
    const panels = dashboard.panels.filter((p: K8sObject) => p.type !== "row");
    expect(dashboard.rows ?? []).toEqual([]);
    expect(panels.length).toBeGreaterThanOrEqual(15);
    const exported = [
      "http_server_request_duration_seconds",
      "rpc_server_call_duration_seconds",
      "rpc_client_call_duration_seconds",
      "messaging_client_sent_messages_total",
      "messaging_client_consumed_messages_total",
      "messaging_process_duration_seconds",
      "pi_webhook_deliveries_total",
      "pi_webhook_attempt_duration_seconds",
      "pi_webhook_oldest_pending_delivery_age_seconds",
      "pi_webhook_failing_endpoints",
      "pi_files_accepted_total",
      "pi_files_refused_total",
      "pi_extraction_backlog",
      "pi_extraction_duration_seconds",
      "pi_extractions_total",
      "pi_connection_transitions_total",
      "pi_tokens_issued_total",
      "pi_tokens_refused_total",
      "pi_outbox_oldest_unrelayed_age_seconds",
      "pi_storage_quota_max_used_ratio",
      "pi_storage_partners_over_quota_ratio",
      "pi_kafka_consumer_lag",
      "up",
      "kube_pod_container_status_restarts_total",
    ];
    const recorded = byKind(docs, "PrometheusRule")[0]
      .spec.groups.flatMap((g: K8sObject) => g.rules.map((r: K8sObject) => r.record))
      .filter(Boolean);
    const named = new Set<string>();
    for (const p of panels) {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable, not a template
      expect([p.title, p.targets.length > 0, p.datasource.uid]).toEqual([p.title, true, "${datasource}"]);
      for (const t of p.targets)
        for (const m of t.expr.matchAll(/([a-z_:][a-z0-9_:]*)\{/g)) named.add(m[1].replace(/_(bucket|count|sum)$/, ""));
    }
    expect([...named].filter((n) => !exported.includes(n) && !recorded.includes(n))).toEqual([]);
    // RED per service, webhook delivery, the extraction backlog, Kafka lag.
    for (const metric of [
      "http_server_request_duration_seconds",
      "rpc_server_call_duration_seconds",
      "pi_webhook_deliveries_total",
      "pi_extraction_backlog",
      "pi_kafka_consumer_lag",
    ])
      expect(named).toContain(metric);
  });
});

describe("Gateway API: an HTTPRoute with the Ingress's paths, host and certificate", () => {
  const routeOf = (docs: K8sObject[], name = `${RELEASE}-gateway`) => find(docs, "HTTPRoute", name);
  const created = (extra: Record<string, unknown> = {}) => ({
    httpRoute: { enabled: true, gateway: { create: true, className: "traefik", ...extra } },
  });

  it("routes the Ingress's paths only: never /healthz, /readyz or /metrics", () => {
    const docs = render(created());
    const route = routeOf(docs);
    expect(route.apiVersion).toBe("gateway.networking.k8s.io/v1");
    expect(route.spec.rules).toHaveLength(1);
    const paths = route.spec.rules[0].matches.map((m: K8sObject) => `${m.path.type} ${m.path.value}`);
    const ingressPaths = find(docs, "Ingress", `${RELEASE}-gateway`).spec.rules[0].http.paths.map(
      (p: K8sObject) => `${p.pathType === "Prefix" ? "PathPrefix" : p.pathType} ${p.path}`,
    );
    expect(paths).toEqual(ingressPaths);
    expect(route.spec.rules[0].backendRefs).toEqual([{ name: `${RELEASE}-gateway`, port: 8080 }]);
    // By Gateway API's matching (Exact: the whole path; PathPrefix: whole segments).
    const routed = (path: string) =>
      route.spec.rules[0].matches.some(({ path: m }: K8sObject) =>
        m.type === "Exact"
          ? m.value === path
          : path === m.value.replace(/\/$/, "") || path.startsWith(m.value.endsWith("/") ? m.value : `${m.value}/`),
      );
    for (const path of ["/oauth/token", "/v1/connections/con_1", "/v1/files", "/openapi.json", "/docs"])
      expect([path, routed(path)]).toEqual([path, true]);
    for (const path of ["/readyz", "/readyz/traffic", "/healthz", "/metrics", "/", "/v2/files"])
      expect([path, routed(path)]).toEqual([path, false]);
    expect(
      routeOf(render({ ...created(), ingress: { docs: false } })).spec.rules[0].matches.map(
        (m: K8sObject) => m.path.value,
      ),
    ).toEqual(["/oauth/token", "/v1/"]);
  });

  it("creates a Gateway whose HTTPS listener holds the Ingress's certificate, and redirects plain HTTP to HTTPS, also without the Ingress", () => {
    for (const ingress of [true, false]) {
      const docs = render({
        ...created({ httpsPort: 8443, httpPort: 8000 }),
        ingress: { enabled: ingress, host: "partner-api.example.com" },
      });
      const gateway = find(docs, "Gateway", `${RELEASE}-partner-api`);
      expect(gateway.spec.gatewayClassName).toBe("traefik");
      expect(gateway.spec.listeners).toEqual([
        {
          name: "https",
          protocol: "HTTPS",
          port: 8443,
          hostname: "partner-api.example.com",
          tls: { mode: "Terminate", certificateRefs: [{ kind: "Secret", name: `${RELEASE}-gateway-tls` }] },
          allowedRoutes: { namespaces: { from: "Same" } },
        },
        {
          name: "http",
          protocol: "HTTP",
          port: 8000,
          hostname: "partner-api.example.com",
          allowedRoutes: { namespaces: { from: "Same" } },
        },
      ]);
      expect(find(docs, "Secret", `${RELEASE}-gateway-tls`).type).toBe("kubernetes.io/tls");
      expect(byKind(docs, "Ingress")).toHaveLength(ingress ? 1 : 0);
      const route = routeOf(docs);
      expect(route.spec.parentRefs).toEqual([{ name: `${RELEASE}-partner-api`, sectionName: "https" }]);
      expect(route.spec.hostnames).toEqual(["partner-api.example.com"]);
      const redirect = routeOf(docs, `${RELEASE}-gateway-http`);
      expect(redirect.spec.parentRefs).toEqual([{ name: `${RELEASE}-partner-api`, sectionName: "http" }]);
      expect(redirect.spec.rules).toEqual([
        { filters: [{ type: "RequestRedirect", requestRedirect: { scheme: "https", statusCode: 301 } }] },
      ]);
    }
    const plain = render({ ...created(), ingress: { https: { enabled: false } } });
    expect(find(plain, "Gateway", `${RELEASE}-partner-api`).spec.listeners.map((l: K8sObject) => l.name)).toEqual([
      "http",
    ]);
    expect(routeOf(plain).spec.parentRefs).toEqual([{ name: `${RELEASE}-partner-api`, sectionName: "http" }]);
    expect(routeOf(plain, `${RELEASE}-gateway-http`)).toBeUndefined();
    const certManager = render({
      ...created(),
      ingress: { enabled: false, host: "api.example.com", https: { certManager: { clusterIssuer: "letsencrypt" } } },
    });
    expect(find(certManager, "Gateway", `${RELEASE}-partner-api`).metadata.annotations).toEqual({
      "cert-manager.io/cluster-issuer": "letsencrypt",
    });
    expect(find(certManager, "Secret", `${RELEASE}-gateway-tls`)).toBeUndefined();
  });

  it("attaches to a Gateway of the operator's (parentRefs), then creates no Gateway and no certificate", () => {
    const parentRefs = [{ name: "shared", namespace: "gateways", sectionName: "https" }];
    const docs = render({
      ingress: { enabled: false },
      httpRoute: { enabled: true, parentRefs, hostnames: ["api.example.com"] },
    });
    expect(byKind(docs, "Gateway")).toEqual([]);
    expect(routeOf(docs).spec.parentRefs).toEqual(parentRefs);
    expect(routeOf(docs).spec.hostnames).toEqual(["api.example.com"]);
    expect(routeOf(docs, `${RELEASE}-gateway-http`)).toBeUndefined();
    expect(find(docs, "Secret", `${RELEASE}-gateway-tls`)).toBeUndefined();
  });

  it("refuses an HTTPRoute with no Gateway to attach to, and a created Gateway without a class", () => {
    const none = chart.helmTemplate(helm, { httpRoute: { enabled: true } });
    expect(none.code).not.toBe(0);
    expect(none.stderr).toMatch(/httpRoute.parentRefs/);
    const classless = chart.helmTemplate(helm, { httpRoute: { enabled: true, gateway: { create: true } } });
    expect(classless.code).not.toBe(0);
    expect(classless.stderr).toMatch(/httpRoute.gateway.className is required/);
  });
});

describe("discovery through the ingress: the token endpoint's public URL from the external host (auth.privateKeyJwt)", () => {
  const DISCOVERY = ["/.well-known/oauth-authorization-server", "/.well-known/smart-configuration"];
  const ingressPaths = (docs: K8sObject[]) =>
    find(docs, "Ingress", `${RELEASE}-gateway`).spec.rules[0].http.paths.map(
      (p: K8sObject) => `${p.pathType} ${p.path}`,
    );
  const routePaths = (docs: K8sObject[]) =>
    find(docs, "HTTPRoute", `${RELEASE}-gateway`).spec.rules[0].matches.map(
      (m: K8sObject) => `${m.path.type} ${m.path.value}`,
    );
  const tokenUrls = (docs: K8sObject[]) => [
    ...new Set(SERVICES.map((s) => envOf(container(docs, s.component)).TOKEN_ENDPOINT_URL)),
  ];
  const withJwt = (values: Record<string, unknown>) => ({ ...values, auth: { privateKeyJwt: true } });

  it("routes both well-known discovery documents through the Ingress and the HTTPRoute, and sets TOKEN_ENDPOINT_URL (aud and issuer) from ingress.host", () => {
    const docs = render(
      withJwt({
        ingress: { host: "partner-api.example.com" },
        httpRoute: { enabled: true, gateway: { create: true, className: "traefik" } },
      }),
    );
    expect(ingressPaths(docs)).toEqual(expect.arrayContaining(DISCOVERY.map((p) => `Exact ${p}`)));
    expect(routePaths(docs)).toEqual(expect.arrayContaining(DISCOVERY.map((p) => `Exact ${p}`)));
    expect(tokenUrls(docs)).toEqual(["https://partner-api.example.com/oauth/token"]);
    // The gateway serves them at exactly these paths.
    const routes = readFileSync(
      join(chart.chartDir, "..", "..", "services", "gateway", "src", "routes", "discovery.ts"),
      "utf8",
    );
    for (const path of DISCOVERY) expect(routes).toContain(`router.get("${path}"`);
  });

  it("takes the host of the HTTPRoute's one hostname without an Ingress host, plain http where the entry serves no TLS, and config.TOKEN_ENDPOINT_URL over both", () => {
    const route = render(
      withJwt({
        ingress: { enabled: false },
        httpRoute: {
          enabled: true,
          hostnames: ["api.example.com"],
          parentRefs: [{ name: "shared", namespace: "gateways" }],
        },
      }),
    );
    expect(tokenUrls(route)).toEqual(["https://api.example.com/oauth/token"]);
    expect(routePaths(route)).toEqual(expect.arrayContaining(DISCOVERY.map((p) => `Exact ${p}`)));
    expect(tokenUrls(render(withJwt({ ingress: { host: "api.example.com", https: { enabled: false } } })))).toEqual([
      "http://api.example.com/oauth/token",
    ]);
    const own = render(
      withJwt({
        ingress: { enabled: false },
        config: { TOKEN_ENDPOINT_URL: "https://edge.example.com/partners/oauth/token" },
      }),
    );
    expect(tokenUrls(own)).toEqual(["https://edge.example.com/partners/oauth/token"]);
  });

  it("refuses to render with no host and private_key_jwt in use, naming the values to set, rather than publish a loopback address", () => {
    for (const values of [
      {},
      { ingress: { enabled: false } },
      {
        ingress: { enabled: false },
        httpRoute: { enabled: true, hostnames: ["*.example.com"], parentRefs: [{ name: "shared" }] },
      },
    ]) {
      const r = chart.helmTemplate(helm, withJwt(values));
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain("the token endpoint's public URL is unknown, and auth.privateKeyJwt is true");
      for (const value of [
        "ingress.host",
        "httpRoute.hostnames",
        "config.TOKEN_ENDPOINT_URL",
        "auth.privateKeyJwt=false",
      ])
        expect(r.stderr).toContain(value);
    }
    // private_key_jwt is in use unless the values say otherwise.
    expect(JSON.parse(readFileSync(schemaFile, "utf8")).properties.auth.properties.privateKeyJwt.type).toBe("boolean");
    expect(readFileSync(join(chart.chartDir, "values.yaml"), "utf8")).toMatch(/\n {2}privateKeyJwt: true\n/);
  });

  it("without private_key_jwt and without a host, routes no discovery document (it would name a loopback address) and sets no TOKEN_ENDPOINT_URL", () => {
    const docs = render({ auth: { privateKeyJwt: false } });
    expect(ingressPaths(docs).filter((p: string) => p.includes(".well-known"))).toEqual([]);
    expect(tokenUrls(docs)).toEqual([""]);
  });
});

describe("scheduling, disruption and images for production (values-production.yaml)", () => {
  const podSpec = (docs: K8sObject[], kind: string, name: string) => find(docs, kind, name).spec.template.spec;
  const production = () => render(parseProduction());
  const parseProduction = () => chartYaml(readFileSync(join(chart.chartDir, "values-production.yaml"), "utf8"));

  it("spreads each component's replicas across nodes and zones (ScheduleAnyway) and keeps them apart (anti-affinity), each on its own pods", () => {
    const docs = render({
      topologySpread: { enabled: true },
      podAntiAffinity: "preferred",
      kafka: { podAntiAffinity: "required" },
    });
    for (const [kind, name, component] of [
      ["Deployment", `${RELEASE}-gateway`, "gateway"],
      ["Deployment", `${RELEASE}-extraction`, "extraction"],
      ["StatefulSet", `${RELEASE}-auth-mongodb`, "auth-mongodb"],
      ["StatefulSet", `${RELEASE}-kafka`, "kafka"],
    ]) {
      const spec = podSpec(docs, kind!, name!);
      const selector = {
        matchLabels: {
          "app.kubernetes.io/name": "partner-integration",
          "app.kubernetes.io/instance": RELEASE,
          "app.kubernetes.io/component": component,
        },
      };
      expect(spec.topologySpreadConstraints).toEqual([
        {
          maxSkew: 1,
          topologyKey: "kubernetes.io/hostname",
          whenUnsatisfiable: "ScheduleAnyway",
          labelSelector: selector,
        },
        {
          maxSkew: 1,
          topologyKey: "topology.kubernetes.io/zone",
          whenUnsatisfiable: "ScheduleAnyway",
          labelSelector: selector,
        },
      ]);
      const term = { topologyKey: "kubernetes.io/hostname", labelSelector: selector };
      expect(spec.affinity.podAntiAffinity).toEqual(
        component === "kafka"
          ? { requiredDuringSchedulingIgnoredDuringExecution: [term] }
          : { preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 100, podAffinityTerm: term }] },
      );
    }
    // Off by default; a component's own affinity replaces the global one.
    const plain = render({ affinity: { nodeAffinity: { x: 1 } }, webhook: { affinity: { nodeAffinity: { y: 2 } } } });
    expect(podSpec(plain, "Deployment", `${RELEASE}-gateway`).topologySpreadConstraints).toBeUndefined();
    expect(podSpec(plain, "Deployment", `${RELEASE}-gateway`).affinity).toEqual({ nodeAffinity: { x: 1 } });
    expect(podSpec(plain, "Deployment", `${RELEASE}-webhook`).affinity).toEqual({ nodeAffinity: { y: 2 } });
  });

  it("runs images by exact tag, and by digest when one is given", () => {
    const digest = `sha256:${"a".repeat(64)}`;
    const docs = render({ gateway: { image: { digest } }, mongodb: { image: { digest } } });
    const { appVersion } = chartYaml(readFileSync(join(chart.chartDir, "Chart.yaml"), "utf8")) as {
      appVersion: string;
    };
    expect(container(docs, "gateway").image).toBe(`partner-integration/gateway:${appVersion}@${digest}`);
    expect(find(docs, "StatefulSet", `${RELEASE}-auth-mongodb`).spec.template.spec.containers[0].image).toBe(
      `mongo:7.0.16@${digest}`,
    );
    expect(chart.helmTemplate(helm, { gateway: { image: { digest: "latest" } } }).code).not.toBe(0);
  });

  it("probes the ops pod for real (its event loop; the admin services it calls) and the data stores with liveness unlike readiness", () => {
    const docs = render();
    const ops = container(docs, "ops");
    expect([ops.livenessProbe.httpGet, ops.readinessProbe.httpGet]).toEqual([
      { path: "/healthz", port: "probes" },
      { path: "/readyz", port: "probes" },
    ]);
    expect(ops.ports).toEqual([{ name: "probes", containerPort: 9096, protocol: "TCP" }]);
    const mongo = find(docs, "StatefulSet", `${RELEASE}-auth-mongodb`).spec.template.spec.containers[0];
    expect(mongo.livenessProbe.tcpSocket).toEqual({ port: "mongodb" });
    expect(mongo.readinessProbe.exec.command.join(" ")).toContain("db.adminCommand({ ping: 1 })");
    const kafka = find(docs, "StatefulSet", `${RELEASE}-kafka`).spec.template.spec.containers[0];
    expect([kafka.livenessProbe.tcpSocket, kafka.readinessProbe.tcpSocket]).toEqual([
      { port: "controller" },
      { port: "kafka" },
    ]);
  });

  it("values-production.yaml: two replicas or more of every service, each with a PDB that lets an unready pod go, autoscaling, priority classes, exact tags, absolute runbooks, external MongoDB and Kafka", () => {
    const docs = production();
    for (const s of SERVICES) {
      const deployment = find(docs, "Deployment", `${RELEASE}-${s.component}`);
      const hpa = find(docs, "HorizontalPodAutoscaler", `${RELEASE}-${s.component}`);
      expect([s.component, hpa ? hpa.spec.minReplicas >= 2 : deployment.spec.replicas >= 2]).toEqual([
        s.component,
        true,
      ]);
      const pdb = find(docs, "PodDisruptionBudget", `${RELEASE}-${s.component}`);
      expect([s.component, pdb?.spec.unhealthyPodEvictionPolicy, pdb?.spec.maxUnavailable]).toEqual([
        s.component,
        "AlwaysAllow",
        1,
      ]);
      expect([
        s.component,
        deployment.spec.template.spec.topologySpreadConstraints.map(
          (c: K8sObject) => `${c.topologyKey} ${c.whenUnsatisfiable}`,
        ),
      ]).toEqual([
        s.component,
        ["kubernetes.io/hostname ScheduleAnyway", "topology.kubernetes.io/zone ScheduleAnyway"],
      ]);
      expect(deployment.spec.template.spec.containers[0].image).toMatch(/:\d+\.\d+\.\d+(@sha256:[a-f0-9]{64})?$/);
    }
    expect(
      byKind(docs, "HorizontalPodAutoscaler")
        .map((h: K8sObject) => h.metadata.name)
        .sort(),
    ).toEqual(["gateway", "auth", "file-intake", "extraction"].map((c) => `${RELEASE}-${c}`).sort());
    expect(byKind(docs, "PriorityClass").map((p: K8sObject) => [p.metadata.name, p.value])).toEqual([
      ["partner-integration-data", 1000000],
      ["partner-integration-api", 100000],
    ]);
    expect(podSpec(docs, "Deployment", `${RELEASE}-gateway`).priorityClassName).toBe("partner-integration-api");
    // External stores: no in-chart database or Kafka; every service's URI from its Secret, Kafka over TLS.
    expect(byKind(docs, "StatefulSet")).toEqual([]);
    expect(envOf(container(docs, "auth")).MONGODB_URI).toEqual({
      secretKeyRef: { name: "auth-mongodb-uri-secret", key: "uri" },
    });
    expect(envOf(container(docs, "gateway")).KAFKA_SSL).toBe("true");
    // Every alert's runbook opens from a pager: an absolute URL, from the one value.
    const alerts = byKind(docs, "PrometheusRule")[0];
    const runbooks = alerts.spec.groups
      .flatMap((g: K8sObject) => g.rules)
      .filter((r: K8sObject) => r.alert)
      .map((r: K8sObject) => r.annotations.runbook_url);
    expect(runbooks.length).toBeGreaterThan(5);
    for (const url of runbooks)
      expect(url).toMatch(/^https:\/\/runbooks\.example\.com\/partner-integration\/operations\.md#[a-z0-9-]+$/);
    // The discovery documents name the host; private_key_jwt is in use.
    expect(envOf(container(docs, "auth")).TOKEN_ENDPOINT_URL).toBe("https://partner-api.example.com/oauth/token");
    // Where the in-chart stores run anyway (the test cluster), they get the data class.
    const values = parseProduction();
    values.kafka.external.brokers = "";
    values.kafka.auth.existingSecret = "";
    values.auth.mongodb.external.existingSecret = "";
    const inChart = render(values);
    expect(podSpec(inChart, "StatefulSet", `${RELEASE}-kafka`).priorityClassName).toBe("partner-integration-data");
    expect(podSpec(inChart, "StatefulSet", `${RELEASE}-auth-mongodb`).priorityClassName).toBe(
      "partner-integration-data",
    );
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

describe("every combination of the optional switches (ingress, networkPolicy, pdb, hpa, external Mongo, external Kafka, metrics, httpRoute)", () => {
  const combinations = chart.allCombinations().map((c) => [chart.describeCombination(c), c] as [string, Combination]);
  // helm lint and helm template of every combination, a few at once in the background and in the
  // tests' order: each test checks its own while helm works on the next ones.
  const rendered = new Map<
    string,
    Promise<[{ code: number | null; output: string }, ReturnType<typeof chart.helmTemplate>]>
  >();
  beforeAll(() => {
    const AT_ONCE = 2;
    const finished: Promise<void>[] = [];
    for (const [name, combination] of combinations) {
      const values = chart.valuesFor(combination);
      const both = (finished[finished.length - AT_ONCE] ?? Promise.resolve()).then(() =>
        Promise.all([chart.helmLintAsync(helm, values), chart.helmTemplateAsync(helm, values)]),
      );
      rendered.set(name, both);
      finished.push(
        both.then(
          () => undefined,
          () => undefined,
        ),
      ); // a failure is its own test's
    }
  });

  it.each(combinations)(
    "%s: helm lint --strict and helm template pass; every object is valid and hardened; references resolve; settings are wired",
    async (name, combination) => {
      const [lint, template] = await rendered.get(name)!;
      rendered.delete(name);
      expect(lint.code).toBe(0);
      if (template.code !== 0) throw new Error(`helm template failed: ${template.stderr}`);
      const docs = template.docs;
      const externalSecrets = combination.externalMongo ? dataServices.map((s) => `${s.component}-mongodb-uri`) : [];
      expect(await chart.validateSchemas(docs)).toEqual([]);
      expect(chart.checkHardening(docs)).toEqual([]);
      expect(chart.checkReferences(docs, { externalSecrets })).toEqual([]);
      expect(chart.checkSettingsWired(docs)).toEqual([]);

      expect(byKind(docs, "Ingress")).toHaveLength(combination.ingress ? 1 : 0);
      expect(byKind(docs, "NetworkPolicy").length > 0).toBe(combination.networkPolicy);
      expect(byKind(docs, "PodDisruptionBudget")).toHaveLength(combination.pdb ? 6 : 0);
      for (const pdb of byKind(docs, "PodDisruptionBudget"))
        expect([pdb.metadata.name, pdb.spec.unhealthyPodEvictionPolicy]).toEqual([pdb.metadata.name, "AlwaysAllow"]);
      expect(byKind(docs, "HorizontalPodAutoscaler")).toHaveLength(combination.hpa ? 6 : 0);
      expect(byKind(docs, "ServiceMonitor")).toHaveLength(combination.metrics ? 5 : 0);
      expect(byKind(docs, "PodMonitor")).toHaveLength(combination.metrics ? 1 : 0);
      expect(byKind(docs, "PrometheusRule")).toHaveLength(combination.metrics ? 1 : 0);
      expect(byKind(docs, "HTTPRoute")).toHaveLength(combination.httpRoute ? 2 : 0);
      const mongo = byKind(docs, "StatefulSet").filter((s: K8sObject) => s.metadata.name.endsWith("-mongodb"));
      expect(mongo).toHaveLength(combination.externalMongo ? 0 : 4);
      expect(find(docs, "StatefulSet", `${RELEASE}-kafka`) === undefined).toBe(combination.externalKafka);
      const env = envOf(container(docs, "connection"));
      if (combination.externalMongo)
        expect(env.MONGODB_URI).toEqual({ secretKeyRef: { name: "connection-mongodb-uri", key: "uri" } });
      if (combination.externalKafka) {
        expect(env.KAFKA_BROKERS).toBe("kafka-0.kafka.example:9092,kafka-1.kafka.example:9094");
        if (combination.networkPolicy) {
          const egress = find(docs, "NetworkPolicy", `${RELEASE}-connection`).spec.egress.flatMap(
            (r: K8sObject) => r.ports ?? [],
          );
          expect(egress).toEqual(
            expect.arrayContaining([
              { port: 9092, protocol: "TCP" },
              { port: 9094, protocol: "TCP" },
            ]),
          );
        }
      }
    },
  );
});
