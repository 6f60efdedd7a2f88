// Regenerates src/gen from the .proto files with buf and protoc-gen-es (both from node_modules).
// `node proto/generate.mjs --check` generates into a temporary directory and fails when the
// committed code differs from a fresh generation.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const protoDir = dirname(fileURLToPath(import.meta.url));
const bin = join(protoDir, "..", "node_modules", ".bin");
const env = { ...process.env, PATH: `${bin}:${process.env.PATH}` };
const check = process.argv.includes("--check");

function buf(args) {
  execFileSync(join(bin, "buf"), args, { cwd: protoDir, env, stdio: ["ignore", "inherit", "inherit"] });
}

function listFiles(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? listFiles(path) : [path];
  });
}

buf(["lint"]);
if (!check) {
  buf(["generate"]);
  console.log("generated proto/src/gen");
} else {
  const out = mkdtempSync(join(tmpdir(), "proto-gen-"));
  try {
    buf(["generate", "--output", out]);
    const fresh = join(out, "src", "gen");
    const committed = join(protoDir, "src", "gen");
    const a = listFiles(fresh)
      .map((f) => relative(fresh, f))
      .sort();
    const b = listFiles(committed)
      .map((f) => relative(committed, f))
      .sort();
    const differing = [...new Set([...a, ...b])].filter((f) => {
      try {
        return !readFileSync(join(fresh, f)).equals(readFileSync(join(committed, f)));
      } catch {
        return true;
      }
    });
    if (differing.length > 0) {
      console.error(`generated code is stale; run npm run generate. Differs: ${differing.join(", ")}`);
      process.exit(1);
    }
    console.log("generated code is current");
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}
