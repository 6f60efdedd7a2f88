import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { gatewayRouter } from "../router.js";
import { openApiJson, openApiYaml } from "../openapi.js";

// The API reference page and its assets, all from this process: no CDN, no outside call.

const swaggerUiDir = dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));

const assetTypes: Record<string, string> = {
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
  "swagger-ui.css": "text/css; charset=utf-8",
  "favicon-32x32.png": "image/png",
};
const assets = new Map<string, Buffer>();

const page = `<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>Partner Integration API reference</title>
    <link rel="stylesheet" href="/docs/swagger-ui.css">
    <link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
  </head>
  <body>
    <div id="reference"></div>
    <script src="/docs/swagger-ui-bundle.js"></script>
    <script src="/docs/reference.js"></script>
  </body>
</html>
`;

// validatorUrl null: Swagger UI would otherwise send the document to an outside validator.
// No "Try it out": the reference page is not a place to type client secrets into.
const init = `window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#reference",
  deepLinking: true,
  validatorUrl: null,
  supportedSubmitMethods: [],
  defaultModelsExpandDepth: 1,
  docExpansion: "list",
});
`;

const csp = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

export default function docsRoutes() {
  const router = gatewayRouter();
  router.get("/openapi.yaml", (ctx) => {
    ctx.type = "application/yaml; charset=utf-8";
    ctx.set("Cache-Control", "no-cache");
    ctx.body = openApiYaml;
  });
  router.get("/openapi.json", (ctx) => {
    ctx.set("Cache-Control", "no-cache");
    ctx.body = openApiJson();
  });
  router.get("/docs", (ctx) => {
    ctx.type = "text/html; charset=utf-8";
    ctx.set("Content-Security-Policy", csp);
    ctx.set("X-Content-Type-Options", "nosniff");
    ctx.set("Cache-Control", "no-cache");
    ctx.body = page;
  });
  router.get("/docs/reference.js", (ctx) => {
    ctx.type = "text/javascript; charset=utf-8";
    ctx.set("Cache-Control", "no-cache");
    ctx.body = init;
  });
  router.get("/docs/:asset", (ctx) => {
    const name = ctx.params.asset!;
    const type = Object.hasOwn(assetTypes, name) ? assetTypes[name] : undefined;
    if (!type) return; // falls through to the one 404
    if (!assets.has(name)) assets.set(name, readFileSync(join(swaggerUiDir, name)));
    ctx.type = type;
    ctx.set("X-Content-Type-Options", "nosniff");
    ctx.set("Cache-Control", "public, max-age=3600");
    ctx.body = assets.get(name);
  });
  return router;
}
