// The bare baseline of an upload in `npm run bench`: a node:http server that takes any POST body,
// hashes it (SHA-256) as it arrives, writes it to a file, fsyncs it, and only then answers 202, so
// the bytes are durable before the answer as they are in the system. The file is removed after
// the answer (the bench sends hundreds of megabytes). Prints "listening <port>" once ready.
import http from "node:http";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { open, unlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = mkdtempSync(join(process.env.SINK_DIR ?? tmpdir(), "pi-bench-sink-"));

const server = http.createServer(async (req, res) => {
  const path = join(dir, randomBytes(8).toString("hex"));
  const file = await open(path, "w");
  const hash = createHash("sha256");
  let size = 0;
  try {
    for await (const chunk of req) {
      hash.update(chunk);
      size += chunk.length;
      await file.write(chunk);
    }
    await file.sync();
  } finally {
    await file.close();
  }
  const body = JSON.stringify({ id: `file_${hash.digest("base64url").slice(0, 22)}`, status: "received", size });
  res.writeHead(202, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(body) });
  res.end(body);
  await unlink(path).catch(() => {});
});
server.requestTimeout = 0;
// The gateway's idle keep-alive: with Node's 5 s default, an upload sent on a connection idle that
// long (the settle wait between rounds) raced the sink closing it, and failed with EPIPE.
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () =>
  process.stdout.write(`listening ${server.address().port}\n`),
);
const quit = () => {
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.on("SIGTERM", quit);
process.on("disconnect", quit);
