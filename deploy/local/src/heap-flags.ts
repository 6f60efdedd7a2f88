import { readFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "./paths.js";

/** The Node heap flags every service runs with: deploy/Dockerfile's NODE_HEAP_FLAGS, their one source. */
export function heapFlagsOfDockerfile(dockerfile = readFileSync(join(repoRoot, "deploy", "Dockerfile"), "utf8")) {
  const m = /^ENV NODE_HEAP_FLAGS="([^"]*)"$/m.exec(dockerfile);
  if (!m) throw new Error("deploy/Dockerfile sets no NODE_HEAP_FLAGS");
  return m[1].split(/\s+/).filter(Boolean);
}
