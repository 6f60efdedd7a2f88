import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

/** Where `npm start` keeps its scrape targets, under its STATE_DIR (the operator contract's, "Metrics"). */
export const PROMETHEUS_TARGETS_FILE = "prometheus/targets.json";

export interface ScrapeTarget {
  service: string;
  replica: number;
  port: number;
}

/**
 * The local stack's processes in Prometheus's file-based service discovery format, one entry per
 * process: `[{"targets": ["127.0.0.1:PORT"], "labels": {"service": "gateway", "replica": "1"}}]`.
 * Written whole (a temporary file renamed over it) whenever a process starts on its port, so that
 * Prometheus, which reads the file again on every change, never reads half of it.
 */
export class PrometheusTargets {
  private readonly targets = new Map<string, ScrapeTarget>();

  constructor(private readonly file: string) {
    mkdirSync(dirname(file), { recursive: true });
  }

  set(name: string, target: ScrapeTarget): void {
    this.targets.set(name, target);
    this.write();
  }

  clear(): void {
    this.targets.clear();
    this.write();
  }

  private write(): void {
    const sorted = [...this.targets.values()].sort(
      (a, b) => a.service.localeCompare(b.service) || a.replica - b.replica,
    );
    const groups = sorted.map((t) => ({
      targets: [`127.0.0.1:${t.port}`],
      labels: { service: t.service, replica: String(t.replica) },
    }));
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify(groups, null, 2)}\n`);
    renameSync(tmp, this.file);
  }
}
