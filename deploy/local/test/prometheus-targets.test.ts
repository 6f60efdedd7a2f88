import { describe, expect, it } from "@jest/globals";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PROMETHEUS_TARGETS_FILE, PrometheusTargets } from "../src/prometheus-targets.js";

// $STATE_DIR/prometheus/targets.json (the operator contract's "Metrics"): Prometheus's file-based
// discovery format, one entry per process, current after a replica restarts on a new port.

describe("the local stack's Prometheus targets", () => {
  it("lists every process once, in file_sd format, and a restart on a new port replaces its entry", () => {
    const dir = mkdtempSync(join(tmpdir(), "pi-targets-"));
    try {
      const file = join(dir, PROMETHEUS_TARGETS_FILE);
      const targets = new PrometheusTargets(file);
      targets.set("gateway-1", { service: "gateway", replica: 1, port: 41001 });
      targets.set("auth-1", { service: "auth", replica: 1, port: 41002 });
      targets.set("auth-2", { service: "auth", replica: 2, port: 41003 });
      const read = () => JSON.parse(readFileSync(file, "utf8")) as unknown;
      expect(read()).toEqual([
        { targets: ["127.0.0.1:41002"], labels: { service: "auth", replica: "1" } },
        { targets: ["127.0.0.1:41003"], labels: { service: "auth", replica: "2" } },
        { targets: ["127.0.0.1:41001"], labels: { service: "gateway", replica: "1" } },
      ]);
      targets.set("auth-2", { service: "auth", replica: 2, port: 41009 });
      expect(read()).toContainEqual({ targets: ["127.0.0.1:41009"], labels: { service: "auth", replica: "2" } });
      expect(JSON.stringify(read())).not.toContain("41003");
      // Written whole: no temporary file is left beside it.
      expect(readdirSync(join(dir, "prometheus"))).toEqual(["targets.json"]);
      targets.clear();
      expect(read()).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
