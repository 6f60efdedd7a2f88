// Provisions a real helm binary for the chart checks, from the Go module proxy only: built once
// with `go install helm.sh/helm/v3/cmd/helm@v3.18.4` into the infrastructure cache
// (INFRA_CACHE_DIR, else <repo>/.state/cache), with the same version stamps the release binaries
// carry (so `helm version` says v3.18.4 and the default Kubernetes version is the one Helm was
// built against, not 1.20).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const HELM_VERSION = "v3.18.4";
// k8s.io/client-go of Helm v3.18.4 is v0.33.x.
const K8S_MAJOR = "1";
const K8S_MINOR = "33";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export function cacheDir(env = process.env) {
  return resolve(env.INFRA_CACHE_DIR || join(repoRoot, ".state", "cache"));
}

function versionOf(binary) {
  const r = spawnSync(binary, ["version", "--template", "{{.Version}}"], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

/**
 * The path of a helm binary of HELM_VERSION: HELM_BIN when set, else the cached one, built first
 * when missing or of another version. Prints one progress line on stderr when it builds.
 */
export function ensureHelm({ env = process.env, progress = (line) => process.stderr.write(`${line}\n`) } = {}) {
  if (env.HELM_BIN) {
    if (!existsSync(env.HELM_BIN)) throw new Error(`HELM_BIN=${env.HELM_BIN} does not exist`);
    return env.HELM_BIN;
  }
  const binDir = join(cacheDir(env), "bin");
  const binary = join(binDir, "helm");
  if (existsSync(binary) && versionOf(binary) === HELM_VERSION) return binary;

  progress(`building helm ${HELM_VERSION} with Go into ${binDir} (first run only, about 2 minutes)`);
  mkdirSync(binDir, { recursive: true });
  // Build into a private directory, then rename: concurrent callers never see half a binary.
  const tmp = mkdtempSync(join(binDir, ".helm-build-"));
  const pkg = "helm.sh/helm/v3";
  const ldflags = [
    "-s",
    "-w",
    `-X ${pkg}/internal/version.version=${HELM_VERSION}`,
    `-X ${pkg}/internal/version.gitTreeState=clean`,
    `-X ${pkg}/pkg/lint/rules.k8sVersionMajor=${K8S_MAJOR}`,
    `-X ${pkg}/pkg/lint/rules.k8sVersionMinor=${K8S_MINOR}`,
    `-X ${pkg}/pkg/chartutil.k8sVersionMajor=${K8S_MAJOR}`,
    `-X ${pkg}/pkg/chartutil.k8sVersionMinor=${K8S_MINOR}`,
  ].join(" ");
  try {
    try {
      execFileSync("go", ["install", "-ldflags", ldflags, `${pkg}/cmd/helm@${HELM_VERSION}`], {
        env: { ...env, GOBIN: tmp, CGO_ENABLED: "0" },
        stdio: ["ignore", "inherit", "inherit"],
      });
    } catch (err) {
      if (err.code === "ENOENT") throw new Error("cannot build helm: `go` is not on PATH (Go 1.24+ is needed)");
      throw new Error(`cannot build helm: go install exited with ${err.status}`);
    }
    renameSync(join(tmp, "helm"), binary);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const built = versionOf(binary);
  if (built !== HELM_VERSION) throw new Error(`built helm reports ${built}, expected ${HELM_VERSION}`);
  progress(`helm ${HELM_VERSION} ready at ${binary}`);
  return binary;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(ensureHelm());
}
