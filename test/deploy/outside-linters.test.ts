// The chart's two renders, the defaults and charts/partner-integration/values-production.yaml, judged by
// outside linters built here from their Go sources at pinned versions (deploy/checks/outside-linters.mjs):
// kube-linter's default checks, kubeconform strict at the oldest and newest Kubernetes the chart
// supports (with the CRDs' schemas), pint offline on the alerting and recording rules. Zero findings;
// an exception may only be listed in the tool's one file under deploy/checks/linters/, with its reason.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { ensureHelm } from "../../deploy/checks/helm.mjs";
import * as chart from "../../deploy/checks/chart.mjs";
import type { K8sObject } from "../../deploy/checks/chart.mjs";
import * as linters from "../../deploy/checks/outside-linters.mjs";

type Render = { name: string; kubeVersion: string; file: string; docs: K8sObject[] };
const renders: Render[] = [];
let tools: Record<string, string>;
const dir = mkdtempSync(join(tmpdir(), "pi-linters-"));
const values: Record<string, () => Record<string, unknown>> = {
  // The chart's defaults, as a throwaway render (no cluster to look secrets up in; no host, so no
  // partner uses private_key_jwt: chart.THROWAWAY).
  default: () => ({}),
  production: () => linters.productionValues(),
};

beforeAll(() => {
  // Building the three tools takes minutes of CPU on a first run (cached after, beside the cluster's).
  tools = linters.ensureLinters();
  const helm = ensureHelm();
  for (const name of Object.keys(values)) {
    for (const kubeVersion of linters.KUBE_VERSIONS) {
      const r = chart.helmTemplate(helm, values[name]!(), { extraArgs: ["--kube-version", kubeVersion] });
      if (r.code !== 0) throw new Error(`the ${name} render at ${kubeVersion} failed: ${r.stderr}`);
      const file = join(dir, `${name}-${kubeVersion}.yaml`);
      writeFileSync(file, r.text);
      renders.push({ name, kubeVersion, file, docs: r.docs });
    }
  }
}, 40 * 60_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const each = () => renders.map((r) => [`${r.name} render at Kubernetes ${r.kubeVersion}`, r] as const);

describe("outside linters on the default and the production render", () => {
  it("render both at the oldest and the newest supported Kubernetes", () => {
    expect(renders.map((r) => `${r.name}@${r.kubeVersion}`)).toEqual([
      "default@1.27.16",
      "default@1.34.4",
      "production@1.27.16",
      "production@1.34.4",
    ]);
  });

  it("kube-linter v0.8.3: no finding of its default checks", () => {
    for (const [what, r] of each()) {
      const result = linters.kubeLinter(tools["kube-linter"]!, r.file);
      // Its default checks ran (not an empty configuration that checks nothing).
      expect([
        what,
        result.checks.length >= 10,
        result.checks.includes("run-as-non-root"),
        result.checks.includes("no-read-only-root-fs"),
      ]).toEqual([what, true, true, true]);
      expect([what, result.findings]).toEqual([what, []]);
    }
  });

  it("kubeconform v0.8.0 -strict: every object valid at Kubernetes 1.27 and 1.34, custom resources against their CRDs", () => {
    for (const [what, r] of each()) {
      const result = linters.kubeconform(tools.kubeconform!, r.file, r.kubeVersion);
      expect([what, result.findings]).toEqual([what, []]);
      // Every object was validated (none skipped for want of a schema).
      expect([what, result.summary]).toEqual([what, { valid: r.docs.length, invalid: 0, errors: 0, skipped: 0 }]);
    }
  });

  it("kubeconform's strict schemas refuse a field the API or the CRD does not know (the check can fail)", () => {
    const r = renders.find((x) => x.name === "production" && x.kubeVersion === "1.27.16")!;
    const deployment = r.docs.find((d) => d.kind === "Deployment");
    const file = join(dir, "bad.yaml");
    writeFileSync(
      file,
      JSON.stringify({
        ...deployment,
        spec: {
          ...deployment.spec,
          template: {
            ...deployment.spec.template,
            spec: {
              ...deployment.spec.template.spec,
              containers: [
                { ...deployment.spec.template.spec.containers[0], lifecycle: { preStop: { sleep: { seconds: 5 } } } },
              ],
            },
          },
        },
      }),
    );
    // preStop.sleep came with Kubernetes 1.29: refused at 1.27, accepted at 1.34.
    expect(linters.kubeconform(tools.kubeconform!, file, "1.27.16").findings.join("\n")).toContain(
      "'sleep' not allowed",
    );
    expect(linters.kubeconform(tools.kubeconform!, file, "1.34.4").findings).toEqual([]);
    // A custom resource by its CRD's schema: a misspelt field of a ServiceMonitor's endpoint.
    const monitor = r.docs.find((d) => d.kind === "ServiceMonitor");
    writeFileSync(
      file,
      JSON.stringify({
        ...monitor,
        spec: { ...monitor.spec, endpoints: [{ ...monitor.spec.endpoints[0], intervall: "30s" }] },
      }),
    );
    expect(linters.kubeconform(tools.kubeconform!, file, "1.34.4").findings.join("\n")).toContain("intervall");
  });

  it("pint v0.87.0 --offline: no problem in the PrometheusRule's rules (the production render has them; the defaults render none)", () => {
    for (const [what, r] of each()) {
      const result = linters.pint(tools.pint!, r.docs);
      expect([what, result.files]).toEqual([what, r.name === "production" ? 1 : 0]);
      expect([what, result.findings]).toEqual([what, []]);
    }
  });

  it("pint reports what it finds (the check can fail): a template naming a label the aggregation drops, a syntax error", () => {
    const bad = {
      kind: "PrometheusRule",
      metadata: { name: "bad" },
      spec: {
        groups: [
          {
            name: "bad",
            rules: [
              {
                alert: "Bad",
                expr: "sum(rate(foo[5m])) > 0",
                annotations: { summary: "{{ $labels.instance }} is down" },
              },
              { record: "bad:rate5m", expr: "sum(rate(foo[5m])" },
            ],
          },
        ],
      },
    };
    const found = linters.pint(tools.pint!, [bad]).findings.join("\n");
    expect(found).toContain("(alerts/template)");
    expect(found).toContain("(promql/syntax)");
  });

  it("list every exception in one file per tool, each with its reason (there are none)", () => {
    for (const file of ["kube-linter.yaml", "pint.hcl"]) {
      for (const e of linters.exceptions(file))
        expect([file, e.name, e.reason.length > 10]).toEqual([file, e.name, true]);
      expect([file, linters.exceptions(file)]).toEqual([file, []]);
    }
    // The reading of those files finds an exception and its reason, and one without.
    const yaml =
      "checks:\n  exclude:\n    # the ops pod idles: no reason to probe it more\n    - no-liveness-probe\n    - latest-tag\n";
    expect(linters.exceptions("kube-linter.yaml", yaml)).toEqual([
      { name: "no-liveness-probe", reason: "the ops pod idles: no reason to probe it more" },
      { name: "latest-tag", reason: "" },
    ]);
    const hcl =
      'checks {\n  disabled = [\n    // no Prometheus offline\n    "promql/series",\n    "alerts/count",\n  ]\n}\n';
    expect(linters.exceptions("pint.hcl", hcl)).toEqual([
      { name: "promql/series", reason: "no Prometheus offline" },
      { name: "alerts/count", reason: "" },
    ]);
  });
});
