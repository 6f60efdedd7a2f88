// The chart's renders judged by outside linters (test/deploy/outside-linters.test.ts; docs/operations.md,
// "Outside linters"), each built from Go sources at a pinned version by deploy/cluster/build-go.sh, into
// the same cache as the cluster's Go programs:
//   kube-linter v0.8.3  its default checks;
//   kubeconform v0.8.0  strict, at the oldest and newest Kubernetes the chart supports (Chart.yaml
//                       kubeVersion >=1.27; the cluster's 1.34), offline: the built-in kinds' schemas are
//                       made here from the swagger.json of k8s.io/kubernetes at each version (from the
//                       module proxy), the custom resources' from the CRDs vendored in deploy/crds;
//   pint v0.87.0        --offline, on the rules of every PrometheusRule.
// Every exception is in one file per tool under deploy/checks/linters/, each with its reason.
import { execFileSync, spawnSync } from "node:child_process";
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments, parse as parseYaml, stringify } from "yaml";
import { repoRoot } from "./helm.mjs";
import { crdFiles, strict as strictCrdSchema } from "./crd-schemas.mjs";

export const TOOLS = { "kube-linter": "v0.8.3", kubeconform: "v0.8.0", pint: "v0.87.0" };
/** The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest (the cluster's). */
export const KUBE_VERSIONS = ["1.27.16", "1.34.4"];
export const lintersDir = join(repoRoot, "deploy", "checks", "linters");
export const productionValuesFile = join(repoRoot, "charts", "partner-integration", "values-production.yaml");

/** Where the tools and schemas are cached: PI_CLUSTER_CACHE (build-go.sh's), else /var/cache/pi-cluster where writable, else .state/cache/pi-cluster. */
export function lintCache(env = process.env) {
  if (env.PI_CLUSTER_CACHE) return env.PI_CLUSTER_CACHE;
  const system = "/var/cache/pi-cluster";
  try {
    mkdirSync(system, { recursive: true });
    accessSync(system, constants.W_OK);
    return system;
  } catch {
    return join(repoRoot, ".state", "cache", "pi-cluster");
  }
}

/** Builds the three tools when missing (build-go.sh waits for a build under way) and returns their paths. */
export function ensureLinters({ env = process.env } = {}) {
  const cache = lintCache(env);
  const paths = Object.fromEntries(
    Object.entries(TOOLS).map(([tool, version]) => [tool, join(cache, "bin", `${tool}-${version}`, tool)]),
  );
  if (Object.values(paths).every((p) => existsSync(p))) return paths;
  const r = spawnSync("bash", [join(repoRoot, "deploy", "cluster", "build-go.sh"), ...Object.keys(TOOLS)], {
    env: { ...env, PI_CLUSTER_CACHE: cache },
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0)
    throw new Error(`build-go.sh ${Object.keys(TOOLS).join(" ")} failed (${r.status}):\n${r.stderr.slice(-4000)}`);
  for (const [tool, p] of Object.entries(paths))
    if (!existsSync(p)) throw new Error(`build-go.sh did not build ${tool} (${p})`);
  return paths;
}

// ---------------------------------------------------------------------------------------------
// kubeconform's schemas, offline.

/** Like the API server's strict field validation: an object schema refuses what it does not name. */
function strictSchema(schema) {
  if (Array.isArray(schema)) return schema.map(strictSchema);
  if (!schema || typeof schema !== "object") return schema;
  const out = {};
  for (const [k, v] of Object.entries(schema)) out[k] = k === "enum" || k === "required" ? v : strictSchema(v);
  if (out.format === "int-or-string" || out["x-kubernetes-int-or-string"]) {
    delete out.type;
    delete out.format;
    out.oneOf = [{ type: "string" }, { type: "integer" }];
  }
  if (out.properties && out.additionalProperties === undefined && !out["x-kubernetes-preserve-unknown-fields"])
    out.additionalProperties = false;
  return out;
}

const QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";

/** The file kubeconform looks for: <kind>[-<group's first label>]-<version>.json, lowercase. */
const schemaFileName = (group, version, kind) =>
  `${[kind, group ? group.split(".")[0] : "", version].filter(Boolean).join("-").toLowerCase()}.json`;

function refsOf(schema, into) {
  if (Array.isArray(schema)) for (const s of schema) refsOf(s, into);
  else if (schema && typeof schema === "object") {
    for (const [k, v] of Object.entries(schema)) {
      if (k === "$ref" && typeof v === "string") into.add(v.replace("#/definitions/", ""));
      else refsOf(v, into);
    }
  }
}

/**
 * Writes <dir>/<version>-standalone-strict/<kind>-<group>-<version>.json for every kind of the
 * Kubernetes release's swagger.json (each file holds the definitions it reaches), once per version.
 */
export function kubernetesSchemas(kubeVersion, dir) {
  const target = join(dir, `v${kubeVersion}-standalone-strict`);
  if (existsSync(join(target, ".complete"))) return target;
  const info = JSON.parse(
    execFileSync("go", ["mod", "download", "-json", `k8s.io/kubernetes@v${kubeVersion}`], {
      cwd: tmpdir(),
      encoding: "utf8",
      maxBuffer: 16 * 1024 * 1024,
    }),
  );
  if (info.Error) throw new Error(`go mod download k8s.io/kubernetes@v${kubeVersion}: ${info.Error}`);
  const swagger = JSON.parse(readFileSync(join(info.Dir, "api", "openapi-spec", "swagger.json"), "utf8"));
  const defs = { ...swagger.definitions };
  defs[QUANTITY] = { oneOf: [{ type: "string" }, { type: "number" }] };
  defs[INT_OR_STRING] = { oneOf: [{ type: "string" }, { type: "integer" }] };
  const partial = `${target}.partial-${process.pid}`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  for (const [name, def] of Object.entries(defs)) {
    for (const gvk of def["x-kubernetes-group-version-kind"] ?? []) {
      const reached = new Set();
      const queue = [name];
      while (queue.length) {
        const n = queue.pop();
        if (reached.has(n)) continue;
        reached.add(n);
        const found = new Set();
        refsOf(defs[n], found);
        queue.push(...found);
      }
      reached.delete(name);
      const definitions = Object.fromEntries([...reached].map((n) => [n, strictSchema(defs[n])]));
      const schema = { ...strictSchema(def), definitions };
      // apiVersion and kind take exactly this kind's values.
      schema.properties.apiVersion = {
        type: "string",
        enum: [gvk.group ? `${gvk.group}/${gvk.version}` : gvk.version],
      };
      schema.properties.kind = { type: "string", enum: [gvk.kind] };
      writeFileSync(join(partial, schemaFileName(gvk.group, gvk.version, gvk.kind)), JSON.stringify(schema));
    }
  }
  writeFileSync(join(partial, ".complete"), `${kubeVersion}\n`);
  rmSync(target, { recursive: true, force: true });
  renameSync(partial, target);
  return target;
}

/** The vendored CRDs' served versions, as kubeconform schemas in <dir>/crds/<kind>-<group>-<version>.json. */
export function crdSchemas(dir) {
  const target = join(dir, "crds");
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  for (const file of crdFiles()) {
    for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
      const crd = doc.toJS();
      if (crd?.kind !== "CustomResourceDefinition") continue;
      for (const version of crd.spec.versions.filter((v) => v.served)) {
        // As crd-schemas.mjs makes them strict for the chart's own checks (metadata left to the API server).
        const schema = strictCrdSchema(version.schema.openAPIV3Schema);
        writeFileSync(
          join(target, schemaFileName(crd.spec.group, version.name, crd.spec.names.kind)),
          JSON.stringify(schema),
        );
      }
    }
  }
  return target;
}

/** kubeconform -strict at one Kubernetes version: { findings: [...], summary, resources }. */
export function kubeconform(binary, manifestFile, kubeVersion, { cache = lintCache() } = {}) {
  const dir = join(cache, "kubeconform-schemas");
  const builtIn = kubernetesSchemas(kubeVersion, dir);
  const crds = crdSchemas(join(dir, `crds-${process.pid}`));
  try {
    const r = spawnSync(
      binary,
      [
        "-strict",
        "-summary",
        "-output",
        "json",
        "-kubernetes-version",
        kubeVersion,
        "-schema-location",
        `${builtIn}/{{ .ResourceKind }}{{ .KindSuffix }}.json`,
        "-schema-location",
        `${crds}/{{ .ResourceKind }}{{ .KindSuffix }}.json`,
        manifestFile,
      ],
      { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 },
    );
    let out;
    try {
      out = JSON.parse(r.stdout);
    } catch {
      throw new Error(`kubeconform gave no JSON (${r.status}): ${r.stdout.slice(0, 2000)}${r.stderr.slice(0, 2000)}`);
    }
    const findings = (out.resources ?? [])
      .filter((x) => x.status !== "statusValid")
      .map((x) => `${x.kind}/${x.name}: ${x.status} ${x.msg ?? ""}`.trim());
    return { findings, summary: out.summary, code: r.status };
  } finally {
    rmSync(join(dir, `crds-${process.pid}`), { recursive: true, force: true });
  }
}

/** kube-linter lint with its default checks and the exceptions of linters/kube-linter.yaml: the findings. */
export function kubeLinter(binary, manifestFile) {
  const r = spawnSync(
    binary,
    ["lint", "--config", join(lintersDir, "kube-linter.yaml"), "--format", "json", manifestFile],
    { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 },
  );
  let out;
  try {
    out = JSON.parse(r.stdout);
  } catch {
    throw new Error(`kube-linter gave no JSON (${r.status}): ${r.stdout.slice(0, 2000)}${r.stderr.slice(0, 2000)}`);
  }
  const findings = (out.Reports ?? []).map(
    (x) =>
      `${x.Object?.K8sObject?.GroupVersionKind?.Kind}/${x.Object?.K8sObject?.Name}: ${x.Check}: ${x.Diagnostic?.Message}`,
  );
  return { findings, checks: (out.Checks ?? []).map((c) => c.name), code: r.status };
}

/** pint --offline lint on the rules of every PrometheusRule of a render: the problems it reports. */
export function pint(binary, docs) {
  const rules = docs.filter((d) => d.kind === "PrometheusRule");
  if (!rules.length) return { findings: [], files: 0 };
  const dir = mkdtempSync(join(tmpdir(), "pi-pint-"));
  try {
    const files = rules.map((rule, i) => {
      const file = join(dir, `${rule.metadata.name}-${i}.yaml`);
      writeFileSync(file, stringify({ groups: rule.spec.groups }));
      return file;
    });
    const r = spawnSync(
      binary,
      ["--offline", "--no-color", "--config", join(lintersDir, "pint.hcl"), "lint", "--min-severity", "info", ...files],
      {
        encoding: "utf8",
        cwd: dir,
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    const text = `${r.stdout}${r.stderr}`;
    if (r.status !== 0 && !/problem/i.test(text)) throw new Error(`pint failed (${r.status}): ${text.slice(0, 4000)}`);
    // Each problem: "<Severity>: <text> (<check>)", then "  ---> <file>:<lines> -> `<rule>`".
    const lines = text.split("\n");
    const findings = lines.flatMap((l, i) =>
      /^(Fatal|Bug|Warning|Information): /.test(l) ? [`${l} ${(lines[i + 1] ?? "").trim()}`] : [],
    );
    return {
      findings: r.status === 0 ? findings : findings.length ? findings : [text.trim()],
      files: files.length,
      output: text,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The production values as an object (to merge over the checks' throwaway settings). */
export function productionValues() {
  return parseYaml(readFileSync(productionValuesFile, "utf8"));
}

/**
 * The exceptions of one tool's file (deploy/checks/linters/): [{ name, reason }]. kube-linter.yaml: the
 * items of `checks.exclude`; pint.hcl: the strings of `disabled`. Each reason is the comment lines
 * right above its item ("" when there are none).
 */
export function exceptions(file, text = readFileSync(join(lintersDir, file), "utf8")) {
  const lines = text.split("\n");
  const yaml = file.endsWith(".yaml");
  const open = lines.findIndex((l) => (yaml ? /^\s*exclude:/.test(l) : /^\s*disabled\s*=\s*\[/.test(l)));
  if (open < 0) return [];
  const out = [];
  for (let i = open + 1; i < lines.length; i++) {
    const line = lines[i];
    if (yaml ? !/^\s*(-|#)/.test(line) : /^\s*\]/.test(line)) break;
    const m = yaml ? line.match(/^\s*-\s*"?([A-Za-z0-9/_-]+)"?\s*$/) : line.match(/^\s*"([A-Za-z0-9/_-]+)"\s*,?\s*$/);
    if (!m) continue;
    const reason = [];
    for (let j = i - 1; j > open && /^\s*(#|\/\/)/.test(lines[j]); j--)
      reason.unshift(lines[j].replace(/^\s*(#|\/\/)\s?/, ""));
    out.push({ name: m[1], reason: reason.join(" ").trim() });
  }
  return out;
}
