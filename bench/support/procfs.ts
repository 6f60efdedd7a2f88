import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { parentPids } from "../../test/support/processes.js";

// What the kernel says about a process: CPU time (utime + stime of /proc/<pid>/stat, every thread
// included) and resident memory (VmRSS of /proc/<pid>/status).

let ticksPerSecond: number | undefined;
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** CPU seconds the process has used so far (user + system), or undefined when it is gone. */
export function cpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / clockTicks(); // utime (14) + stime (15)
  } catch {
    return undefined;
  }
}

/** Resident set size in MiB, or undefined when the process is gone. */
export function rssMiB(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN) / 1024;
  } catch {
    return undefined;
  }
}

/** Samples the RSS of some processes every `everyMs` until stopped; the peak of each. */
export function rssSampler(pids: number[], everyMs = 20) {
  const peak = new Map<number, number>(pids.map((p) => [p, rssMiB(p) ?? 0]));
  const sample = () => {
    for (const p of pids) peak.set(p, Math.max(peak.get(p)!, rssMiB(p) ?? 0));
  };
  const timer = setInterval(sample, everyMs);
  return {
    stop(): Map<number, number> {
      clearInterval(timer);
      sample();
      return peak;
    },
  };
}

/**
 * Starts counting the CPU of some processes and of their children alive at both ends (extraction's
 * child, named "<parent> child"); stop() gives the CPU seconds each name used since.
 */
export function cpuMeter(processes: { pid: number; name: string }[]) {
  const names = new Map(processes.map((p) => [p.pid, p.name]));
  const children = [...parentPids()].filter(([pid, parent]) => names.has(parent) && !names.has(pid));
  const counted = [...processes, ...children.map(([pid, parent]) => ({ pid, name: `${names.get(parent)} child` }))];
  const before = new Map(counted.map((p) => [p.pid, cpuSeconds(p.pid)]));
  const started = performance.now();
  return {
    stop() {
      const seconds = (performance.now() - started) / 1000;
      const byName = new Map<string, number>();
      for (const p of counted) {
        const a = before.get(p.pid);
        const b = cpuSeconds(p.pid);
        if (a === undefined || b === undefined) continue;
        byName.set(p.name, (byName.get(p.name) ?? 0) + (b - a));
      }
      const total = [...byName.values()].reduce((x, y) => x + y, 0);
      return { seconds, total, byName };
    },
  };
}
