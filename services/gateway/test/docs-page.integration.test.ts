import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { parse } from "yaml";
import { openApiYaml } from "../src/openapi.js";
import { startEdge, type Edge } from "./edge-harness.js";

// The OpenAPI document and the API reference page rendered from it (Swagger UI from the
// swagger-ui-dist package, served by the gateway itself), checked in a real headless Chromium:
// Debian's package (apt-get install chromium; .ci/run installs it when missing).

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
// Required wherever this lane runs: a missing browser fails the browser test with how to install
// it, never skips it.
const missingChromium = existsSync(CHROMIUM)
  ? undefined
  : `no Chromium at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`;

let edge: Edge;
let browser: Browser | undefined;

beforeAll(async () => {
  edge = await startEdge();
});
afterAll(async () => {
  await browser?.close();
  await edge.stop();
});

describe("the OpenAPI document, served", () => {
  it("GET /openapi.yaml is the document as it is in the repository, with no bearer", async () => {
    const res = await edge.send("GET", "/openapi.yaml");
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/yaml; charset=utf-8");
    expect(res.text).toBe(openApiYaml);
  });

  it("GET /openapi.json is the same document as JSON", async () => {
    const res = await edge.send("GET", "/openapi.json");
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.json).toEqual(parse(openApiYaml));
  });

  it("serves only the renderer's own files under /docs; anything else there is the one 404", async () => {
    expect((await edge.send("GET", "/docs/swagger-ui-bundle.js")).status).toBe(200);
    for (const path of [
      "/docs/package.json",
      "/docs/..%2Fpackage.json",
      "/docs/index.html",
      "/docs/swagger-ui-bundle.js.map",
    ]) {
      const res = await edge.send("GET", path);
      expect([path, res.status, res.json?.error?.code]).toEqual([path, 404, "not_found"]);
    }
    expect((await edge.send("POST", "/openapi.json")).status).toBe(405);
  });
});

describe("the API reference page (GET /docs) in a headless Chromium", () => {
  it("renders every operation of the document, loading nothing from anywhere but the gateway", async () => {
    if (missingChromium) throw new Error(missingChromium);
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    });
    const page = await browser.newPage();
    const requested: string[] = [];
    const problems: string[] = [];
    page.on("request", (req) => requested.push(req.url()));
    page.on("console", (msg) => msg.type() === "error" && problems.push(msg.text()));
    page.on("pageerror", (err) => problems.push(err.message));

    const res = await page.goto(`${edge.baseUrl}/docs`, { waitUntil: "load" });
    expect(res?.status()).toBe(200);
    expect(res?.headers()["content-security-policy"]).toContain("default-src 'none'");
    await page.locator(".opblock").first().waitFor({ timeout: 30_000 });

    const summaries = await page.locator(".opblock-summary-description").allInnerTexts();
    expect(summaries).toEqual(
      expect.arrayContaining([
        "Request an access token",
        "Request a connection to an elder",
        "Get a connection",
        "Revoke a connection",
        "Send a file",
        "Get a file's status",
      ]),
    );
    const paths = (await page.locator(".opblock-summary-path").allInnerTexts()).map((p) => p.replace(/\u200b/g, ""));
    expect(paths).toEqual(
      expect.arrayContaining([
        "/oauth/token",
        "/v1/connections",
        "/v1/connections/{id}",
        "/v1/files",
        "/v1/files/{id}",
      ]),
    );
    // The test helpers, under a tag of their own that says they exist in test mode only.
    const helpers = page.locator("#operations-tag-Test_helpers").locator("xpath=..");
    // biome-ignore lint/performance/useDomNodeTextContent: Playwright's innerText, the text a reader sees
    expect(await helpers.innerText()).toContain("Test mode only.");
    expect(
      (await helpers.locator(".opblock-summary-path").allInnerTexts()).map((p) => p.replace(/\u200b/g, "")).sort(),
    ).toEqual(["approve", "decline", "expire", "sever"].map((act) => `/v1/test_helpers/connections/{id}/${act}`));
    // biome-ignore lint/performance/useDomNodeTextContent: Playwright's innerText, the text a reader sees
    const text = await page.locator("body").innerText();
    expect(text).toContain("Partner Integration API");
    expect(text).toContain("connection.approved");
    expect(text).toContain("connection.revoked");

    expect(requested.filter((url) => !url.startsWith(edge.baseUrl) && !url.startsWith("data:"))).toEqual([]);
    expect(problems).toEqual([]);
  }, 60_000);
});
