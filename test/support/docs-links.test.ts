import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "@jest/globals";

// The docs are a map of the repository: every path they name in code (`services/gateway/src/app.ts`)
// or as a link, and every `npm run <script>` they name, must exist. A rename or a deletion that
// leaves a doc behind fails here, not in a reader's hands.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const docs = [
  "README.md",
  "CHANGELOG.md",
  "HISTORY.md",
  ...readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];
const scripts = Object.keys(
  (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts,
);

/** Top-level folders and files a path in the docs starts with. */
const TOP =
  /^(?:\.ci|\.state|bench|charts|deploy|docs|proto|sdk|services|test)\/|^(?:package\.json|jest\.config\.js|tsconfig\.json|skaffold\.yaml|CHANGELOG\.md|HISTORY\.md|README\.md|releases\.json)$/;
/** Placeholders and patterns, not one path: `services/<name>`, `test/e2e/*.test.ts`, `$STATE_DIR/...`. */
const PATTERN = /[<>*{}$…]|\.\.\./;
/** Made when something runs (state, builds): named in the docs, not kept in the repository. */
const GENERATED = /^\.state\/|\/dist\/|^deploy\/cluster\/\.cache\//;

/** The repository paths a doc names: in code spans and as relative links (anchors, line numbers and a trailing slash dropped). */
export function pathsNamed(markdown: string, docPath: string): string[] {
  const found = new Set<string>();
  const prose = markdown.replace(/^```[\s\S]*?^```/gm, "");
  for (const [, span] of prose.matchAll(/`([^`\n]+)`/g)) {
    // `kubectl exec deploy/pi-ops`: a Kubernetes object, not a path.
    if (span!.startsWith("kubectl")) continue;
    for (const word of span!.split(/\s+/)) {
      const path = word
        .replace(/^["'(]+|["'),;:.]+$/g, "")
        .replace(/(?::\d+(?:-\d+)?|#.*)$/, "")
        .replace(/\/$/, "");
      if (TOP.test(path) && !PATTERN.test(path)) found.add(path);
    }
  }
  for (const [, target] of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:|^#/.test(target!)) continue;
    const path = join(dirname(docPath), target!.replace(/#.*$/, "")).replace(/\/$/, "");
    // The specs sit beside the repository (../shared/spec), not in it.
    if (!PATTERN.test(path) && !path.startsWith("..")) found.add(path);
  }
  return [...found].filter((p) => !GENERATED.test(p)).sort();
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
export const anchorOf = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");

/** The links to a heading of a doc in the repository: [doc, anchor] (a bare `#anchor` is the doc's own). */
export function anchorsLinked(markdown: string, docPath: string): [string, string][] {
  const prose = markdown.replace(/^```[\s\S]*?^```/gm, "");
  const links: [string, string][] = [];
  for (const [, target] of prose.matchAll(/\]\(([^)\s]*#[^)\s]+)\)/g)) {
    if (/^[a-z]+:/.test(target!)) continue;
    const [file, anchor] = target!.split("#") as [string, string];
    const doc = file === "" ? docPath : join(dirname(docPath), file);
    if (doc.endsWith(".md") && !doc.startsWith("..")) links.push([doc, anchor]);
  }
  return links;
}

/** Test files a doc names by file name alone (`sdk-stack.integration.test.ts`, after its folder was named once). */
export function testFilesNamed(markdown: string): string[] {
  return [
    ...new Set(
      [...markdown.matchAll(/`([\w.-]+\.test\.ts)`|[\s,(]([\w-]+(?:\.[\w-]+)*\.test\.ts)\b/g)].map(
        (m) => (m[1] ?? m[2])!,
      ),
    ),
  ]
    .filter((name) => !/^\.|^(?:integration|unit)\.test\.ts$/.test(name))
    .sort();
}

/** Every file name under the repository's own folders (not dependencies, builds or state). */
function fileNames(dir = root, names = new Set<string>()): Set<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (["node_modules", ".git", ".state", "dist"].includes(entry.name)) continue;
    if (entry.isDirectory()) fileNames(join(dir, entry.name), names);
    else names.add(entry.name);
  }
  return names;
}

/** The npm scripts a doc runs: `npm run <script>` and `npm run --silent <script>`, in code spans and blocks. */
export function scriptsNamed(markdown: string): string[] {
  return [...new Set([...markdown.matchAll(/npm run (?:--silent )?([a-z][\w:-]*)/g)].map((m) => m[1]!))].sort();
}

describe("the docs name only what exists", () => {
  it.each(docs)("%s: every repository path it names exists", (doc) => {
    const missing = pathsNamed(readFileSync(join(root, doc), "utf8"), doc).filter((p) => !existsSync(join(root, p)));
    expect(missing).toEqual([]);
  });

  it.each(docs)("%s: every test file it names by file name exists", (doc) => {
    const names = fileNames();
    expect(testFilesNamed(readFileSync(join(root, doc), "utf8")).filter((n) => !names.has(n))).toEqual([]);
  });

  it.each(docs)("%s: every heading it links to exists", (doc) => {
    const broken = anchorsLinked(readFileSync(join(root, doc), "utf8"), doc).filter(([target, anchor]) => {
      if (!existsSync(join(root, target))) return false; // reported as a missing path
      const headings = [...readFileSync(join(root, target), "utf8").matchAll(/^#+ (.+)$/gm)].map((m) =>
        anchorOf(m[1]!),
      );
      return !headings.includes(anchor);
    });
    expect(broken).toEqual([]);
  });

  it.each(docs)("%s: every npm script it runs is in package.json", (doc) => {
    expect(scriptsNamed(readFileSync(join(root, doc), "utf8")).filter((s) => !scripts.includes(s))).toEqual([]);
  });

  it("finds what a doc names, and only that", () => {
    const md = [
      "See `services/gateway/src/app.ts:12` and `bench/files.bench.ts`, [files](files.md#uploads),",
      "[the spec](https://example.com/x), `services/<name>/src`, `test/e2e/*.test.ts`, `.state/logs/`,",
      "`npm run bench -- bench/system.bench.ts` and `npm run --silent ops -- partner create`,",
      "`kubectl exec deploy/pi-ops`, [spec](../../shared/spec/x.md), `sdk-unit.test.ts`, and `*.integration.test.ts`.",
    ].join("\n");
    expect(pathsNamed(md, "docs/x.md")).toEqual([
      "bench/files.bench.ts",
      "bench/system.bench.ts",
      "docs/files.md",
      "services/gateway/src/app.ts",
    ]);
    expect(scriptsNamed(md)).toEqual(["bench", "ops"]);
    expect(testFilesNamed(md)).toEqual(["sdk-unit.test.ts"]);
    expect(anchorsLinked(md, "docs/x.md")).toEqual([["docs/files.md", "uploads"]]);
    expect(anchorOf("Nothing lost, nothing twice at once")).toBe("nothing-lost-nothing-twice-at-once");
    expect(anchorOf("GET /v1/files/{id}")).toBe("get-v1filesid");
  });
});
