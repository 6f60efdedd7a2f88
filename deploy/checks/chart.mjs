// Checks of charts/partner-integration, used by test/deploy/chart.test.ts (and runnable alone:
// `node deploy/checks/chart.mjs` prints every problem and exits non-zero when there is one).
//
// Each rendering is parsed and every object validated against the Kubernetes schemas of
// kubernetes-models 4.x; then our own rules: selectors match labels, every pod is hardened, every
// long-running container has probes and resources, images match the Skaffold artifacts, every
// setting the services read is wired as an environment variable.
import { execFile, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { repoRoot } from "./helm.mjs";
import { validateCustomResource } from "./crd-schemas.mjs";

export const chartDir = join(repoRoot, "charts", "partner-integration");
export const RELEASE = "pi";
export const NAMESPACE = "partner-integration";
export const KUBE_VERSION = "1.33.0";

/** The application services: values key, component (object-name suffix), whether it owns a database. */
export const SERVICES = [
  { key: "gateway", component: "gateway", data: false },
  { key: "auth", component: "auth", data: true },
  { key: "connection", component: "connection", data: true },
  { key: "fileIntake", component: "file-intake", data: true },
  // File-intake's image, its own entry point (skaffold builds no image of its own).
  { key: "extraction", component: "extraction", data: false, image: "file-intake" },
  { key: "webhook", component: "webhook", data: true },
];

/** The optional switches; each combination of them is rendered. */
export const SWITCHES = {
  ingress: (on) => ({ ingress: { enabled: on } }),
  networkPolicy: (on) => ({ networkPolicy: { enabled: on } }),
  pdb: (on) => Object.fromEntries(SERVICES.map((s) => [s.key, { podDisruptionBudget: { enabled: on } }])),
  hpa: (on) => Object.fromEntries(SERVICES.map((s) => [s.key, { autoscaling: { enabled: on } }])),
  externalMongo: (on) =>
    Object.fromEntries(
      SERVICES.filter((s) => s.data).map((s) => [
        s.key,
        { mongodb: { external: { existingSecret: on ? `${s.component}-mongodb-uri` : "" } } },
      ]),
    ),
  externalKafka: (on) => ({
    kafka: { external: { brokers: on ? "kafka-0.kafka.example:9092,kafka-1.kafka.example:9094" : "" } },
  }),
  // Every metrics switch: the ServiceMonitors, the PrometheusRule and the dashboard.
  metrics: (on) => ({
    metrics: { serviceMonitor: { enabled: on }, prometheusRule: { enabled: on }, dashboard: { enabled: on } },
  }),
  // Gateway API: an HTTPRoute on a Gateway the chart creates.
  httpRoute: (on) => ({ httpRoute: { enabled: on, gateway: { create: on, className: "traefik" } } }),
};

function deepMerge(a, b) {
  if (typeof a !== "object" || a === null || Array.isArray(a)) return b;
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = k in out ? deepMerge(out[k], v) : v;
  return out;
}

/** Values for one combination: { ingress: true, pdb: false, ... } -> a values object. */
export function valuesFor(combination) {
  return Object.entries(combination).reduce((acc, [name, on]) => deepMerge(acc, SWITCHES[name](on)), {});
}

/**
 * The combinations rendered: every combination of the first six switches, each with metrics and
 * httpRoute both off and both on (2^7); and metrics or httpRoute alone with every combination of the
 * switches they meet in the templates, ingress (the certificate they share) and networkPolicy (the
 * scraper's rule), 2 x 2^2. Pdb, hpa and the external data stores touch no object of theirs: the
 * whole 2^8 would render 120 more combinations that tell nothing new.
 */
export function allCombinations() {
  const base = ["ingress", "networkPolicy", "pdb", "hpa", "externalMongo", "externalKafka"];
  const product = (names) =>
    Array.from({ length: 2 ** names.length }, (_, i) =>
      Object.fromEntries(names.map((n, bit) => [n, Boolean(i & (1 << bit))])),
    );
  const off = Object.fromEntries(Object.keys(SWITCHES).map((n) => [n, false]));
  return [
    ...product(base).flatMap((c) => [
      { ...off, ...c },
      { ...off, ...c, metrics: true, httpRoute: true },
    ]),
    ...["metrics", "httpRoute"].flatMap((alone) =>
      product(["ingress", "networkPolicy"]).map((c) => ({ ...off, ...c, [alone]: true })),
    ),
  ];
}

export function describeCombination(c) {
  const on = Object.entries(c)
    .filter(([, v]) => v)
    .map(([k]) => k);
  return on.length ? on.join("+") : "all switches off";
}

export const NO_HOST_NEEDED = { auth: { privateKeyJwt: false } };
/**
 * Most renderings here name no host: they say that no partner uses private_key_jwt
 * (auth.privateKeyJwt false), else the chart refuses to render without the token endpoint's public
 * URL (the tests of that rule set it themselves).
 *
 * These checks render without a cluster (helm template, helm lint), where the chart refuses to
 * generate secrets unless told this is a throwaway render (values generateSecrets, docs/security.md
 * "Generated secrets"): every rendering here says so, unless its values set generateSecrets
 * themselves (the tests of that rule do).
 */
export const THROWAWAY = { generateSecrets: "always", ...NO_HOST_NEEDED };
const throwaway = (values) => deepMerge(THROWAWAY, values ?? {});

function withValuesFile(values, fn) {
  const dir = mkdtempSync(join(tmpdir(), "pi-chart-"));
  try {
    const file = join(dir, "values.json");
    writeFileSync(file, JSON.stringify(throwaway(values)));
    return fn(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** helm with a values file, without blocking this process: { status, stdout, stderr }. */
async function helmAsync(helm, values, args) {
  const dir = await mkdtemp(join(tmpdir(), "pi-chart-"));
  try {
    const file = join(dir, "values.json");
    await writeFile(file, JSON.stringify(throwaway(values)));
    return await new Promise((resolve) => {
      execFile(
        helm,
        [...args, "-f", file],
        { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 },
        (err, stdout, stderr) => {
          if (err && typeof err.code !== "number") resolve({ status: null, stdout, stderr: `${stderr}${err.message}` });
          else resolve({ status: err ? err.code : 0, stdout, stderr });
        },
      );
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const lintArgs = () => ["lint", "--strict", "--kube-version", KUBE_VERSION, chartDir];
const lintResult = (r) => ({ code: r.status, output: `${r.stdout}${r.stderr}` });

export function helmLint(helm, values) {
  return withValuesFile(values, (file) =>
    lintResult(spawnSync(helm, [...lintArgs(), "-f", file], { encoding: "utf8" })),
  );
}

/** helmLint without blocking this process (several renderings may run at once). */
export async function helmLintAsync(helm, values) {
  return lintResult(await helmAsync(helm, values, lintArgs()));
}

const templateArgs = ({ release = RELEASE, namespace = NAMESPACE, extraArgs = [] } = {}) => [
  "template",
  release,
  chartDir,
  "--namespace",
  namespace,
  "--kube-version",
  KUBE_VERSION,
  ...extraArgs,
];

function templateResult(r) {
  if (r.status !== 0) return { code: r.status, stderr: r.stderr, docs: [], text: "" };
  const docs = [];
  for (const doc of parseAllDocuments(r.stdout)) {
    if (doc.errors.length) throw new Error(`rendered YAML does not parse: ${doc.errors[0].message}`);
    const obj = doc.toJS();
    if (obj) docs.push(obj);
  }
  return { code: 0, stderr: r.stderr, docs, text: r.stdout };
}

/** helm template; returns { code, stderr, docs } with docs the parsed objects (hooks included). */
export function helmTemplate(helm, values, options = {}) {
  return withValuesFile(values, (file) =>
    templateResult(
      spawnSync(helm, [...templateArgs(options), "-f", file], { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 }),
    ),
  );
}

/** helmTemplate without blocking this process (several renderings may run at once). */
export async function helmTemplateAsync(helm, values, options = {}) {
  return templateResult(await helmAsync(helm, values, templateArgs(options)));
}

/**
 * NOTES.txt as `helm install` would print it (helm template leaves it out): rendered through a
 * probe template added to a temporary copy of the chart.
 */
export function renderNotes(helm, values, { release = RELEASE, namespace = NAMESPACE } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "pi-notes-"));
  try {
    const copy = join(dir, "partner-integration");
    cpSync(chartDir, copy, { recursive: true });
    writeFileSync(
      join(copy, "templates", "zz-notes-probe.yaml"),
      'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-probe\ndata:\n  notes: {{ include "partner-integration/templates/NOTES.txt" . | quote }}\n',
    );
    const file = join(dir, "values.json");
    writeFileSync(file, JSON.stringify(throwaway(values)));
    const r = spawnSync(
      helm,
      [
        "template",
        release,
        copy,
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        "-f",
        file,
        "--show-only",
        "templates/zz-notes-probe.yaml",
      ],
      { encoding: "utf8" },
    );
    if (r.status !== 0) throw new Error(`rendering NOTES.txt failed: ${r.stderr}`);
    return parseAllDocuments(r.stdout)[0].toJS().data.notes;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes schemas.

const modelCache = new Map();
async function modelFor(apiVersion, kind) {
  const key = `${apiVersion}/${kind}`;
  if (!modelCache.has(key)) {
    let Model;
    try {
      const mod = await import(`kubernetes-models/${apiVersion}`);
      Model = mod[kind];
    } catch {
      Model = undefined;
    }
    modelCache.set(key, Model);
  }
  return modelCache.get(key);
}

/** Problems found by kubernetes-models' validate() on every object, or for custom resources by their vendored CRD's schema (crd-schemas.mjs). */
export async function validateSchemas(docs) {
  const problems = [];
  for (const obj of docs) {
    const where = `${obj.kind}/${obj.metadata?.name}`;
    const custom = validateCustomResource(obj);
    if (custom) {
      problems.push(...custom.map((p) => `${where}: ${p}`));
      continue;
    }
    const Model = await modelFor(obj.apiVersion, obj.kind);
    if (!Model) {
      problems.push(`${where}: no kubernetes-models schema for ${obj.apiVersion} ${obj.kind}`);
      continue;
    }
    try {
      new Model(obj).validate();
    } catch (err) {
      problems.push(`${where}: ${err.message ?? err}`);
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Our own rules.

export const workloadKinds = new Set(["Deployment", "StatefulSet", "Job"]);
export const workloads = (docs) => docs.filter((o) => workloadKinds.has(o.kind));
export const byKind = (docs, kind) => docs.filter((o) => o.kind === kind);
export const find = (docs, kind, name) => docs.find((o) => o.kind === kind && o.metadata.name === name);

function matches(selector, labels) {
  return Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
}

/** Every container of every pod template: non-root, read-only root, no capabilities, seccomp, no token, /tmp. */
export function checkHardening(docs) {
  const problems = [];
  for (const w of workloads(docs)) {
    const where = `${w.kind}/${w.metadata.name}`;
    const pod = w.spec.template.spec;
    const psc = pod.securityContext ?? {};
    if (pod.automountServiceAccountToken !== false)
      problems.push(`${where}: automountServiceAccountToken is not false`);
    if (psc.runAsNonRoot !== true) problems.push(`${where}: pod runAsNonRoot is not true`);
    if (!(psc.runAsUser > 0)) problems.push(`${where}: pod runAsUser is not a non-zero uid`);
    if (psc.seccompProfile?.type !== "RuntimeDefault")
      problems.push(`${where}: pod seccompProfile is not RuntimeDefault`);
    if (pod.hostNetwork || pod.hostPID || pod.hostIPC) problems.push(`${where}: uses a host namespace`);
    const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]));
    for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
      const at = `${where} container ${c.name}`;
      const sc = c.securityContext ?? {};
      if (sc.allowPrivilegeEscalation !== false) problems.push(`${at}: allowPrivilegeEscalation is not false`);
      if (sc.readOnlyRootFilesystem !== true) problems.push(`${at}: readOnlyRootFilesystem is not true`);
      if (!(sc.capabilities?.drop ?? []).includes("ALL")) problems.push(`${at}: capabilities do not drop ALL`);
      if ((sc.capabilities?.add ?? []).length) problems.push(`${at}: adds capabilities`);
      if (sc.privileged) problems.push(`${at}: privileged`);
      if ((sc.runAsNonRoot ?? psc.runAsNonRoot) !== true) problems.push(`${at}: runAsNonRoot is not true`);
      if (sc.runAsUser === 0) problems.push(`${at}: runs as uid 0`);
      if ((sc.seccompProfile ?? psc.seccompProfile)?.type !== "RuntimeDefault")
        problems.push(`${at}: seccomp is not RuntimeDefault`);
      const tmp = (c.volumeMounts ?? []).find((m) => m.mountPath === "/tmp");
      if (!tmp || !volumes.get(tmp.name)?.emptyDir) problems.push(`${at}: no emptyDir mounted at /tmp`);
      const r = c.resources ?? {};
      for (const [kind, res] of [
        ["requests", "cpu"],
        ["requests", "memory"],
        ["limits", "memory"],
        ["limits", "cpu"],
      ]) {
        if (r[kind]?.[res] === undefined) problems.push(`${at}: resources.${kind}.${res} not set`);
      }
      if (!/:[^/]+$|@sha256:/.test(c.image) || /:latest$/.test(c.image))
        problems.push(`${at}: image ${c.image} has no pinned tag`);
      if (w.kind !== "Job") {
        if (!c.livenessProbe) problems.push(`${at}: no livenessProbe`);
        if (!c.readinessProbe) problems.push(`${at}: no readinessProbe`);
      }
    }
  }
  return problems;
}

/** Selectors match labels; every reference (Service, Secret, ConfigMap, HPA/PDB target) resolves. */
export function checkReferences(docs, { externalSecrets = [] } = {}) {
  const problems = [];
  // The workloads' pods and the bare Pods (`helm test`'s, which a NetworkPolicy admits by label).
  const pods = [
    ...workloads(docs).map((w) => ({ w, labels: w.spec.template.metadata?.labels ?? {}, spec: w.spec.template.spec })),
    ...byKind(docs, "Pod").map((w) => ({ w, labels: w.metadata.labels ?? {}, spec: w.spec })),
  ];
  for (const w of workloads(docs)) {
    if (w.kind === "Job") continue;
    if (!matches(w.spec.selector?.matchLabels, w.spec.template.metadata?.labels))
      problems.push(`${w.kind}/${w.metadata.name}: selector does not match its pod labels`);
    if (w.kind === "StatefulSet" && !find(docs, "Service", w.spec.serviceName))
      problems.push(`StatefulSet/${w.metadata.name}: serviceName ${w.spec.serviceName} is not rendered`);
  }
  for (const svc of byKind(docs, "Service")) {
    const targets = pods.filter(
      (p) => p.w.kind !== "Job" && p.w.kind !== "Pod" && matches(svc.spec.selector, p.labels),
    );
    if (targets.length !== 1) {
      problems.push(`Service/${svc.metadata.name}: selector matches ${targets.length} workloads, expected 1`);
      continue;
    }
    const ports = targets[0].spec.containers.flatMap((c) => c.ports ?? []);
    for (const p of svc.spec.ports) {
      const ok =
        typeof p.targetPort === "string"
          ? ports.some((cp) => cp.name === p.targetPort)
          : ports.some((cp) => cp.containerPort === (p.targetPort ?? p.port));
      if (!ok)
        problems.push(
          `Service/${svc.metadata.name}: port ${p.name} targets ${p.targetPort}, which no container declares`,
        );
    }
  }
  const secrets = new Set([...byKind(docs, "Secret").map((s) => s.metadata.name), ...externalSecrets]);
  const configMaps = new Set(byKind(docs, "ConfigMap").map((s) => s.metadata.name));
  for (const { w, spec } of pods) {
    const where = `${w.kind}/${w.metadata.name}`;
    for (const c of spec.containers) {
      for (const e of c.env ?? []) {
        const ref = e.valueFrom?.secretKeyRef;
        if (ref && !secrets.has(ref.name))
          problems.push(
            `${where}: env ${e.name} refers to Secret ${ref.name}, which is neither rendered nor declared external`,
          );
        const cm = e.valueFrom?.configMapKeyRef;
        if (cm && !byKind(docs, "ConfigMap").some((m) => m.metadata.name === cm.name && cm.key in (m.data ?? {})))
          problems.push(`${where}: env ${e.name} refers to ConfigMap ${cm.name} key ${cm.key}, not rendered`);
      }
    }
    for (const v of spec.volumes ?? []) {
      if (v.configMap && !configMaps.has(v.configMap.name))
        problems.push(`${where}: volume ${v.name} refers to ConfigMap ${v.configMap.name}, not rendered`);
      if (v.secret && !secrets.has(v.secret.secretName))
        problems.push(`${where}: volume ${v.name} refers to Secret ${v.secret.secretName}, not rendered`);
    }
    if (
      spec.serviceAccountName &&
      spec.serviceAccountName !== "default" &&
      !find(docs, "ServiceAccount", spec.serviceAccountName)
    ) {
      problems.push(`${where}: ServiceAccount ${spec.serviceAccountName} is not rendered`);
    }
  }
  for (const pdb of byKind(docs, "PodDisruptionBudget")) {
    const n = pods.filter((p) => p.w.kind === "Deployment" && matches(pdb.spec.selector.matchLabels, p.labels)).length;
    if (n !== 1) problems.push(`PodDisruptionBudget/${pdb.metadata.name}: selects ${n} Deployments, expected 1`);
  }
  for (const hpa of byKind(docs, "HorizontalPodAutoscaler")) {
    const target = find(docs, hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name);
    if (!target)
      problems.push(
        `HorizontalPodAutoscaler/${hpa.metadata.name}: target ${hpa.spec.scaleTargetRef.name} is not rendered`,
      );
    else if (target.spec.replicas !== undefined)
      problems.push(`Deployment/${target.metadata.name}: sets replicas while an HPA scales it`);
  }
  for (const ing of byKind(docs, "Ingress")) {
    for (const rule of ing.spec.rules ?? []) {
      for (const path of rule.http?.paths ?? []) {
        const svc = find(docs, "Service", path.backend.service.name);
        if (!svc)
          problems.push(`Ingress/${ing.metadata.name}: backend Service ${path.backend.service.name} is not rendered`);
        else if (
          !svc.spec.ports.some(
            (p) => p.name === path.backend.service.port.name || p.port === path.backend.service.port.number,
          )
        ) {
          problems.push(`Ingress/${ing.metadata.name}: backend port is not a port of Service ${svc.metadata.name}`);
        }
      }
    }
  }
  for (const route of byKind(docs, "HTTPRoute")) {
    const where = `HTTPRoute/${route.metadata.name}`;
    for (const ref of route.spec.rules.flatMap((r) => r.backendRefs ?? [])) {
      const svc = find(docs, "Service", ref.name);
      if (!svc) problems.push(`${where}: backend Service ${ref.name} is not rendered`);
      else if (!svc.spec.ports.some((p) => p.port === ref.port))
        problems.push(`${where}: backend port ${ref.port} is not a port of Service ${svc.metadata.name}`);
    }
    for (const parent of route.spec.parentRefs) {
      const gateway = find(docs, "Gateway", parent.name);
      if (gateway && parent.sectionName && !gateway.spec.listeners.some((l) => l.name === parent.sectionName))
        problems.push(`${where}: Gateway ${parent.name} has no listener ${parent.sectionName}`);
    }
  }
  for (const gateway of byKind(docs, "Gateway")) {
    const secrets = new Set(byKind(docs, "Secret").map((s) => s.metadata.name));
    for (const ref of gateway.spec.listeners.flatMap((l) => l.tls?.certificateRefs ?? [])) {
      if (!secrets.has(ref.name) && !externalSecrets.includes(ref.name))
        problems.push(`Gateway/${gateway.metadata.name}: certificate Secret ${ref.name} is not rendered`);
    }
  }
  for (const monitor of byKind(docs, "ServiceMonitor")) {
    const services = byKind(docs, "Service").filter((svc) =>
      matches(monitor.spec.selector.matchLabels, svc.metadata.labels),
    );
    const scraped = services.filter((svc) =>
      monitor.spec.endpoints.every((e) => svc.spec.ports.some((p) => p.name === e.port)),
    );
    if (scraped.length !== 1)
      problems.push(
        `ServiceMonitor/${monitor.metadata.name}: its endpoints' ports are on ${scraped.length} of the Services it selects, expected 1 (each pod scraped once)`,
      );
  }
  for (const monitor of byKind(docs, "PodMonitor")) {
    const scraped = workloads(docs).filter(
      (w) => w.kind !== "Job" && matches(monitor.spec.selector.matchLabels, w.spec.template.metadata?.labels),
    );
    const ports = scraped.flatMap((w) => w.spec.template.spec.containers.flatMap((c) => c.ports ?? []));
    if (scraped.length !== 1 || !monitor.spec.podMetricsEndpoints.every((e) => ports.some((p) => p.name === e.port)))
      problems.push(
        `PodMonitor/${monitor.metadata.name}: selects ${scraped.length} workloads with its endpoints' ports, expected 1`,
      );
  }
  for (const np of byKind(docs, "NetworkPolicy")) {
    const where = `NetworkPolicy/${np.metadata.name}`;
    if (pods.filter((p) => matches(np.spec.podSelector.matchLabels, p.labels)).length === 0)
      problems.push(`${where}: podSelector matches no pod of the release`);
    for (const rule of [
      ...(np.spec.ingress ?? []).flatMap((r) => r.from ?? []),
      ...(np.spec.egress ?? []).flatMap((r) => r.to ?? []),
    ]) {
      if (
        rule.podSelector &&
        !rule.namespaceSelector &&
        pods.filter((p) => matches(rule.podSelector.matchLabels, p.labels)).length === 0
      ) {
        problems.push(
          `${where}: peer podSelector ${JSON.stringify(rule.podSelector.matchLabels)} matches no pod of the release`,
        );
      }
    }
  }
  return problems;
}

/** Settings the services read, from services/common/src/runtime/settings.ts (one schema for all). */
export function serviceSettings() {
  const text = readFileSync(join(repoRoot, "services", "common", "src", "settings.ts"), "utf8");
  const body = text.slice(text.indexOf("settingsSchema = z.object({"));
  const end = body.indexOf("\n});");
  return [...body.slice(0, end).matchAll(/^ {2}([A-Z][A-Z0-9_]*):/gm)].map((m) => m[1]);
}

/** Settings of the operator contract's table (shared/spec/operator-contract.md beside the repo), if present. */
export function contractSettings() {
  const candidates = [
    join(repoRoot, "..", "shared", "spec", "operator-contract.md"),
    join(repoRoot, "shared", "spec", "operator-contract.md"),
  ];
  const file = candidates.find((f) => existsSync(f));
  if (!file) return undefined;
  const text = readFileSync(file, "utf8");
  const section = text.slice(text.indexOf("## Settings"), text.indexOf("## Operator CLI"));
  return [...section.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \|/gm)].map((m) => m[1]);
}

/** Settings that only the local stack reads (in a cluster, replicas are each Deployment's own). */
export const LOCAL_ONLY_SETTINGS = [
  "STATE_DIR",
  "SERVICE_REPLICAS",
  "GATEWAY_REPLICAS",
  "AUTH_REPLICAS",
  "CONNECTION_REPLICAS",
  "FILE_INTAKE_REPLICAS",
  "EXTRACTION_REPLICAS",
  "WEBHOOK_REPLICAS",
];

export function envOf(container) {
  return Object.fromEntries((container.env ?? []).map((e) => [e.name, e.value ?? e.valueFrom]));
}

/** Settings that only some services get (from Secrets): the keys of the services that read them. */
export const SECRET_SETTINGS = {
  CREDENTIAL_PEPPER: ["auth"],
  CREDENTIAL_PEPPERS: ["auth"],
  DATA_KEYS: ["auth", "fileIntake"],
};

/** Settings only some services get, and those only in some setups: the services that may have them. AUDIT_RETENTION_MONGODB_URI: auth's, with the chart's own MongoDB (not the stand-in, not an external one). */
export const OPTIONAL_SERVICE_SETTINGS = { AUDIT_RETENTION_MONGODB_URI: ["auth"] };

/** Settings a service may lack: the Kafka user, with an external Kafka whose users the chart is not given (kafka.auth). Both or neither. */
export const OPTIONAL_PAIRED_SETTINGS = ["KAFKA_USERNAME", "KAFKA_PASSWORD"];

/** Every setting is an env var of every service (MONGODB_URI on data services, the SECRET_SETTINGS on theirs). */
export function checkSettingsWired(docs, { release = RELEASE } = {}) {
  const problems = [];
  const all = [...new Set([...serviceSettings(), ...(contractSettings() ?? [])])].filter(
    (s) => !LOCAL_ONLY_SETTINGS.includes(s),
  );
  for (const s of SERVICES) {
    const dep = find(docs, "Deployment", `${release}-${s.component}`);
    if (!dep) {
      problems.push(`Deployment ${release}-${s.component} is not rendered`);
      continue;
    }
    const env = envOf(dep.spec.template.spec.containers[0]);
    for (const name of all) {
      const optional = name in OPTIONAL_SERVICE_SETTINGS;
      const expected = optional
        ? OPTIONAL_SERVICE_SETTINGS[name].includes(s.key)
        : name in SECRET_SETTINGS
          ? SECRET_SETTINGS[name].includes(s.key)
          : name === "MONGODB_URI"
            ? s.data
            : true;
      if (expected && !optional && !(name in env) && !OPTIONAL_PAIRED_SETTINGS.includes(name))
        problems.push(`${s.component}: setting ${name} is not set`);
      if (!expected && name in env)
        problems.push(`${s.component}: setting ${name} is set but belongs to another service`);
    }
    if (new Set(OPTIONAL_PAIRED_SETTINGS.map((name) => name in env)).size > 1)
      problems.push(`${s.component}: ${OPTIONAL_PAIRED_SETTINGS.join(" and ")} must be set together`);
    const names = (dep.spec.template.spec.containers[0].env ?? []).map((e) => e.name);
    const dup = names.filter((n, i) => names.indexOf(n) !== i);
    if (dup.length) problems.push(`${s.component}: env set twice: ${dup.join(", ")}`);
  }
  return problems;
}

/** skaffold.yaml, parsed. */
export function skaffoldConfig() {
  return parseAllDocuments(readFileSync(join(repoRoot, "skaffold.yaml"), "utf8"))[0].toJS();
}

/** Images the Skaffold artifacts produce, by chart values key, as the chart renders them by default. */
export function checkSkaffoldImages(docs, { release = RELEASE } = {}) {
  const problems = [];
  const config = skaffoldConfig();
  const artifacts = config.build.artifacts;
  const release0 = config.deploy.helm.releases[0];
  const templates = release0.setValueTemplates ?? {};
  if (!release0.chartPath?.replace(/\/$/, "").endsWith("charts/partner-integration")) {
    problems.push(`skaffold deploys ${release0.chartPath}, not charts/partner-integration`);
  }
  for (const s of SERVICES) {
    const artifact = artifacts.find((a) => a.docker?.buildArgs?.SERVICE === (s.image ?? s.component));
    if (!artifact) {
      problems.push(`skaffold.yaml has no artifact built with SERVICE=${s.image ?? s.component}`);
      continue;
    }
    if (artifact.docker.dockerfile !== "deploy/Dockerfile")
      problems.push(`artifact ${artifact.image} is not built from deploy/Dockerfile`);
    const sanitized = artifact.image.replace(/[/\-.:]/g, "_");
    const repoTpl = templates[`${s.key}.image.repository`];
    const tagTpl = templates[`${s.key}.image.tag`];
    if (repoTpl !== `{{.IMAGE_REPO_${sanitized}}}`)
      problems.push(`skaffold sets ${s.key}.image.repository to ${repoTpl}, expected {{.IMAGE_REPO_${sanitized}}}`);
    if (tagTpl !== `{{.IMAGE_TAG_${sanitized}}}@{{.IMAGE_DIGEST_${sanitized}}}`)
      problems.push(`skaffold sets ${s.key}.image.tag to ${tagTpl}`);
    // By default the chart renders the same repository the artifact builds (so `helm install`
    // after `skaffold build` without templating still points at the right images).
    const dep = find(docs, "Deployment", `${release}-${s.component}`);
    const image = dep?.spec.template.spec.containers[0].image ?? "";
    if (!image.startsWith(`${artifact.image}:`))
      problems.push(
        `${s.component}: the chart's default image ${image} is not the Skaffold artifact ${artifact.image}`,
      );
  }
  // The operator CLI's pod runs the gateway's artifact.
  const gateway = artifacts.find((a) => a.docker?.buildArgs?.SERVICE === "gateway");
  if (gateway) {
    const sanitized = gateway.image.replace(/[/\-.:]/g, "_");
    if (templates["ops.image.repository"] !== `{{.IMAGE_REPO_${sanitized}}}`)
      problems.push("skaffold does not set ops.image.repository to the gateway's artifact");
    if (templates["ops.image.tag"] !== `{{.IMAGE_TAG_${sanitized}}}@{{.IMAGE_DIGEST_${sanitized}}}`)
      problems.push("skaffold does not set ops.image.tag to the gateway's artifact");
    const ops = find(docs, "Deployment", `${release}-ops`);
    if (ops && !ops.spec.template.spec.containers[0].image.startsWith(`${gateway.image}:`))
      problems.push(`ops: the chart's default image is not the Skaffold artifact ${gateway.image}`);
  }
  const extra = artifacts.filter((a) => !SERVICES.some((s) => a.docker?.buildArgs?.SERVICE === s.component));
  if (extra.length)
    problems.push(`skaffold artifacts without a chart service: ${extra.map((a) => a.image).join(", ")}`);
  return problems;
}

/** Workspaces of package.json that deploy/Dockerfile does not copy before `npm ci`. */
export function checkDockerfileWorkspaces() {
  const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8"));
  const dockerfile = readFileSync(join(repoRoot, "deploy", "Dockerfile"), "utf8");
  return (pkg.workspaces ?? [])
    .filter((ws) => !dockerfile.includes(`COPY ${ws}/package.json ${ws}/`))
    .map((ws) => `deploy/Dockerfile does not copy ${ws}/package.json before npm ci`);
}

// ---------------------------------------------------------------------------------------------

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  const { ensureHelm } = await import("./helm.mjs");
  const helm = ensureHelm();
  const started = Date.now();
  let failures = 0;
  const report = (what, problems) => {
    if (problems.length) {
      failures += problems.length;
      console.log(`FAIL ${what}\n  ${problems.join("\n  ")}`);
    }
  };
  for (const combination of [null, ...allCombinations()]) {
    const values = combination ? valuesFor(combination) : {};
    const what = combination ? describeCombination(combination) : "default values";
    const lint = helmLint(helm, values);
    if (lint.code !== 0) report(`helm lint --strict (${what})`, [lint.output]);
    const t = helmTemplate(helm, values);
    if (t.code !== 0) {
      report(`helm template (${what})`, [t.stderr]);
      continue;
    }
    const externalSecrets = combination?.externalMongo
      ? SERVICES.filter((s) => s.data).map((s) => `${s.component}-mongodb-uri`)
      : [];
    report(`schemas (${what})`, await validateSchemas(t.docs));
    report(`hardening (${what})`, checkHardening(t.docs));
    report(`references (${what})`, checkReferences(t.docs, { externalSecrets }));
    report(`settings (${what})`, checkSettingsWired(t.docs));
  }
  report("skaffold images", checkSkaffoldImages(helmTemplate(helm, {}).docs));
  report("Dockerfile workspaces", checkDockerfileWorkspaces());
  console.log(
    `${failures === 0 ? "chart checks passed" : `${failures} problem(s)`} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  process.exit(failures === 0 ? 0 : 1);
}
