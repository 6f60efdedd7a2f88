import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** Every live process's parent, read from /proc: pid to parent pid. */
export function parentPids(): Map<number, number> {
  const parents = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // the process ended while we looked
    }
  }
  return parents;
}

/** Every live process below pid (children, grandchildren, ...), read from /proc. */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const [child, ppid] of parentPids()) children.set(ppid, [...(children.get(ppid) ?? []), child]);
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

/** The remote ports of `pid`'s established TCP connections: its sockets' inodes, found in /proc/<pid>/net/tcp{,6}. */
export function connectedPorts(pid: number): Set<number> {
  const sockets = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const inode = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1];
      if (inode) sockets.add(inode);
    } catch {
      // closed while we looked
    }
  }
  const ports = new Set<number>();
  for (const table of ["tcp", "tcp6"])
    for (const line of readFileSync(`/proc/${pid}/net/${table}`, "utf8").trim().split("\n").slice(1)) {
      // sl local_address rem_address st ... inode: st 01 is ESTABLISHED.
      const [, , remote, state, , , , , , inode] = line.trim().split(/\s+/);
      if (state === "01" && sockets.has(inode!)) ports.add(Number.parseInt(remote!.split(":")[1]!, 16));
    }
  return ports;
}

/** Whether `pid` is a live process (not a zombie). */
export { processAlive as alive } from "../../deploy/local/src/infra.js";
