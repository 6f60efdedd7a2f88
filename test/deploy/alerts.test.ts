// The chart's alerts, tested with promtool (Debian's `prometheus` package; .ci/run installs it):
// the PrometheusRule as the chart renders it (metrics.prometheusRule.enabled) is written out as a
// rules file, checked (`promtool check rules`) and run against the cases of test/deploy/alerts/*.yaml
// (`promtool test rules`), which must make every alert fire once and stay quiet once. Each alert's
// runbook is a section of docs/operations.md.
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { ensureHelm, repoRoot } from "../../deploy/checks/helm.mjs";
import * as chart from "../../deploy/checks/chart.mjs";
import type { K8sObject } from "../../deploy/checks/chart.mjs";

const casesDir = join(repoRoot, "test", "deploy", "alerts");
const caseFiles = readdirSync(casesDir)
  .filter((f) => f.endsWith(".yaml"))
  .sort();
let helm: string;

function promtool(...args: string[]) {
  const r = spawnSync("promtool", args, { encoding: "utf8" });
  if (r.error)
    throw new Error(
      `promtool cannot run (${r.error.message}): install Debian's prometheus package (apt-get install prometheus), as .ci/run does`,
    );
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

function renderRule(prometheusRule: Record<string, unknown> = {}): K8sObject {
  const t = chart.helmTemplate(helm, { metrics: { prometheusRule: { enabled: true, ...prometheusRule } } });
  if (t.code !== 0) throw new Error(t.stderr);
  const rules = chart.byKind(t.docs, "PrometheusRule");
  expect(rules).toHaveLength(1);
  return rules[0];
}

const alertsOf = (rule: K8sObject): K8sObject[] =>
  rule.spec.groups.flatMap((g: K8sObject) => g.rules.filter((r: K8sObject) => r.alert));

beforeAll(() => {
  helm = ensureHelm();
}, 10 * 60_000);

describe("the PrometheusRule's alerts (metrics.prometheusRule.enabled)", () => {
  let rule: K8sObject;
  let dir: string;
  beforeAll(() => {
    rule = renderRule();
    dir = mkdtempSync(join(tmpdir(), "pi-alerts-"));
    writeFileSync(join(dir, "rules.yaml"), stringify({ groups: rule.spec.groups }));
    for (const f of caseFiles)
      writeFileSync(
        join(dir, f),
        stringify({ rule_files: ["rules.yaml"], ...parse(readFileSync(join(casesDir, f), "utf8")) }),
      );
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("is valid for promtool (promtool check rules)", () => {
    const check = promtool("check", "rules", join(dir, "rules.yaml"));
    expect(check.output).toContain("SUCCESS");
    expect(check.code).toBe(0);
  });

  it.each(caseFiles)("passes promtool test rules with the cases of test/deploy/alerts/%s", (file) => {
    const run = promtool("test", "rules", join(dir, file));
    expect(run.output).toContain("SUCCESS");
    expect(run.code).toBe(0);
  });

  it("has a case where each alert fires and one where it stays quiet", () => {
    const fires = new Set<string>();
    const quiet = new Set<string>();
    for (const f of caseFiles) {
      for (const test of parse(readFileSync(join(casesDir, f), "utf8")).tests) {
        for (const t of test.alert_rule_test ?? []) (t.exp_alerts?.length ? fires : quiet).add(t.alertname);
      }
    }
    const names = alertsOf(rule)
      .map((a) => a.alert as string)
      .sort();
    expect(names.length).toBeGreaterThanOrEqual(14);
    expect(names.filter((n) => !fires.has(n))).toEqual([]);
    expect(names.filter((n) => !quiet.has(n))).toEqual([]);
    // No case names an alert the rules lack.
    expect([...fires, ...quiet].filter((n) => !names.includes(n))).toEqual([]);
  });

  it("points every alert at its runbook, a section of docs/operations.md named after it, and gives it a severity", () => {
    const docs = readFileSync(join(repoRoot, "docs", "operations.md"), "utf8");
    const headings = new Set([...docs.matchAll(/^#{2,4} +`?([A-Za-z]+)`?\s*$/gm)].map((m) => m[1]!.toLowerCase()));
    for (const alert of alertsOf(rule)) {
      expect([alert.alert, alert.annotations.runbook_url]).toEqual([
        alert.alert,
        `docs/operations.md#${alert.alert.toLowerCase()}`,
      ]);
      expect([alert.alert, headings.has(alert.alert.toLowerCase())]).toEqual([alert.alert, true]);
      expect(["critical", "warning", "info"]).toContain(alert.labels.severity);
      expect(alert.annotations.summary).toBeTruthy();
    }
  });

  it("selects this release's series only: its namespace and its Services' jobs, its pods", () => {
    const exprs = rule.spec.groups
      .flatMap((g: K8sObject) => g.rules.map((r: K8sObject) => r.expr as string))
      .join("\n");
    expect(exprs).toContain(`namespace="${chart.NAMESPACE}",job="${chart.RELEASE}-gateway"`);
    const jobs = chart.SERVICES.map((s) => `${chart.RELEASE}-${s.component}`);
    expect(jobs).toContain(`${chart.RELEASE}-extraction`);
    expect(exprs).toContain(`namespace="${chart.NAMESPACE}",job=~"(${jobs.join("|")})"`);
    expect(exprs).toContain(`namespace="${chart.NAMESPACE}",pod=~"${chart.RELEASE}-.+"`);
    expect(exprs).not.toMatch(/@[A-Z_]+@/);
  });

  it("follows the SLOs and the runbooks' address given in the values", () => {
    const custom = renderRule({
      runbookBaseUrl: "https://runbooks.example/operations",
      slo: { availability: 0.995, latency: 0.95, latencyThresholdSeconds: "2.5" },
    });
    const alerts = alertsOf(custom);
    const expr = (name: string) => alerts.find((a) => a.alert === name).expr as string;
    expect(expr("PartnerApiAvailabilityFastBurn")).toContain("> 14.4 * 0.005");
    expect(expr("PartnerApiLatencyFastBurn")).toContain("> 14.4 * 0.05");
    const slow = custom.spec.groups[0].rules.find(
      (r: K8sObject) => r.record === "pi:v1_request_slow:ratio_rate5m",
    ).expr;
    expect(slow).toContain('le="2.5"');
    expect(
      alerts.every((a) => a.annotations.runbook_url === `https://runbooks.example/operations#${a.alert.toLowerCase()}`),
    ).toBe(true);
  });
});
