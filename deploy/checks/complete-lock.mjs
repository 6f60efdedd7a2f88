// Completes package-lock.json with the platform-specific optional packages of other platforms.
// The registry this project is developed against serves only the packages of its own platform,
// so `npm install` here cannot record (say) @swc/core-darwin-arm64, and npm 11's `npm ci` then
// refuses the lock as out of sync. This adds each missing entry with its version, os, cpu and libc
// (taken from the package's name, which follows the napi-rs convention), so `npm ci` accepts the
// lock everywhere and skips or fetches those packages by platform as usual.
// Run after any `npm install` that changed the lock: `node deploy/checks/complete-lock.mjs`.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const lockPath = join(root, "package-lock.json");

function missingPackages() {
  try {
    execFileSync("npm", ["ci", "--dry-run", "--ignore-scripts", "--no-audit", "--no-fund"], {
      cwd: root,
      stdio: "pipe",
    });
    return [];
  } catch (err) {
    const out = `${err.stdout ?? ""}${err.stderr ?? ""}`;
    const names = [...out.matchAll(/Missing: (@?[^@\s]+(?:\/[^@\s]+)?)@/g)].map((m) => m[1]);
    if (names.length === 0) throw new Error(`npm ci --dry-run failed for another reason:\n${out}`);
    return names;
  }
}

const osNames = {
  darwin: "darwin",
  linux: "linux",
  win32: "win32",
  android: "android",
  freebsd: "freebsd",
  openharmony: "openharmony",
};
const cpuNames = {
  arm64: "arm64",
  x64: "x64",
  arm: "arm",
  ia32: "ia32",
  ppc64: "ppc64",
  s390x: "s390x",
  riscv64: "riscv64",
  loong64: "loong64",
};

function platformOf(name) {
  const parts = name.split("/").pop().split("-");
  const os = parts.find((p) => p in osNames);
  const cpu = parts.find((p) => p in cpuNames);
  const libc = parts.some((p) => p.startsWith("musl"))
    ? "musl"
    : parts.some((p) => p === "gnu" || p === "gnueabihf")
      ? "glibc"
      : undefined;
  return { os: os && [osNames[os]], cpu: cpu && [cpuNames[cpu]], libc: os === "linux" && libc ? [libc] : undefined };
}

const missing = missingPackages();
if (missing.length === 0) {
  console.log("package-lock.json is complete");
  process.exit(0);
}
const lock = JSON.parse(readFileSync(lockPath, "utf8"));
for (const name of missing) {
  const parent = Object.values(lock.packages).find((p) => p.optionalDependencies && name in p.optionalDependencies);
  if (!parent) throw new Error(`no package in the lock depends on ${name}`);
  const { os, cpu, libc } = platformOf(name);
  lock.packages[`node_modules/${name}`] = {
    version: parent.optionalDependencies[name],
    ...(cpu ? { cpu } : {}),
    license: parent.license,
    optional: true,
    ...(os ? { os } : {}),
    ...(libc ? { libc } : {}),
  };
}
lock.packages = Object.fromEntries(
  Object.entries(lock.packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b))),
);
writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`added ${missing.length} entries: ${missing.join(", ")}`);
const still = missingPackages();
if (still.length > 0) throw new Error(`still missing: ${still.join(", ")}`);
