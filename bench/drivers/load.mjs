// The load generator of `npm run bench`, in a process of its own (forked by bench/support/driver.ts)
// so that neither the system nor a baseline shares an event loop with it. The same code drives both
// sides of every comparison. It takes one JSON command per IPC message and answers with the result:
//
//   { id, op: "autocannon", options }        a fixed-duration run of autocannon (requests per second, latency)
//   { id, op: "uploads", ... }               `count` uploads of one multipart body, `concurrency` at a time
//                                            (none started after `deadline`, epoch ms, if given)
//   { id, op: "paced", ... }                 uploads started at a fixed rate for a time, whatever their answers
//   { id, op: "probe", ... }                 one GET after another until { op: "stop", probe } (latency timeline)
import http from "node:http";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import autocannon from "autocannon";

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
// Paced uploads are an open loop: a request is sent when it is due, never queued behind a socket.
const unbounded = new http.Agent({ keepAlive: true });

/** One request with a Buffer body (or none); resolves with the status, the body text and the time taken. */
function request(url, { method = "GET", headers = {}, body, via = agent } = {}) {
  return new Promise((resolve) => {
    const started = performance.now();
    // A server that answers before the body is sent (a refusal) and closes makes the write fail
    // (EPIPE): the answer, if it came, is what the request got, with the error beside it.
    let answered;
    const failed = (err) =>
      resolve({
        status: answered?.statusCode ?? 0,
        text: String(err),
        ms: performance.now() - started,
        at: Date.now(),
      });
    const req = http.request(
      url,
      { method, headers: body ? { ...headers, "content-length": body.length } : headers, agent: via },
      (res) => {
        answered = res;
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () =>
          resolve({
            status: res.statusCode,
            text: Buffer.concat(chunks).toString("utf8"),
            ms: performance.now() - started,
            at: Date.now(),
          }),
        );
        res.on("error", failed);
      },
    );
    req.on("error", failed);
    req.end(body);
  });
}

/** The multipart body of POST /v1/files: the elder, then the file (the sink takes the same bytes). */
function multipart(elder, file, filename) {
  const boundary = `----bench${randomBytes(12).toString("hex")}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="elder"\r\n\r\n${elder}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  return {
    contentType: `multipart/form-data; boundary=${boundary}`,
    body: Buffer.concat([head, file, Buffer.from(`\r\n--${boundary}--\r\n`)]),
  };
}

/** `size` bytes of plain text (printable lines), the same for every call. */
function text(size) {
  const line = Buffer.from("Medication list: 1 tablet daily with food, review in 2 weeks.\n");
  const out = Buffer.alloc(size);
  for (let i = 0; i < size; i += line.length) line.copy(out, i, 0, Math.min(line.length, size - i));
  return out;
}

/** The file of an upload command: a file's bytes (path), given bytes (base64) or generated text of `size` bytes. */
const fileOf = (cmd) =>
  cmd.path !== undefined
    ? readFileSync(cmd.path)
    : cmd.base64 !== undefined
      ? Buffer.from(cmd.base64, "base64")
      : text(cmd.size);

function uploadRequest(cmd) {
  const { contentType, body } = multipart(cmd.elder, fileOf(cmd), cmd.filename ?? "upload.txt");
  const headers = { "content-type": contentType, ...(cmd.token ? { authorization: `Bearer ${cmd.token}` } : {}) };
  return { body, headers };
}

const idOf = (text) => {
  try {
    return JSON.parse(text).id;
  } catch {
    return undefined;
  }
};

async function uploads(cmd) {
  const { body, headers } = uploadRequest(cmd);
  const results = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(cmd.concurrency, cmd.count) }, async () => {
      // An optional deadline (epoch ms): no upload starts after it, the ones under way finish.
      while (next < cmd.count && !(cmd.deadline && Date.now() > cmd.deadline)) {
        next++;
        const r = await request(cmd.url, { method: "POST", headers, body });
        results.push({
          status: r.status,
          ms: r.ms,
          id: idOf(r.text),
          error: r.status === 202 ? undefined : r.text.slice(0, 300),
        });
      }
    }),
  );
  return { seconds: (performance.now() - started) / 1000, bodyBytes: body.length, results };
}

async function paced(cmd) {
  const { body, headers } = uploadRequest(cmd);
  const total = Math.round(cmd.rate * cmd.seconds);
  const interval = 1000 / cmd.rate;
  const started = performance.now();
  const pending = [];
  for (let i = 0; i < total; i++) {
    const due = started + i * interval;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    pending.push(request(cmd.url, { method: "POST", headers, body, via: unbounded }));
  }
  const sentSeconds = (performance.now() - started) / 1000;
  const answers = await Promise.all(pending);
  return {
    sentSeconds,
    lastAnswerAt: Math.max(...answers.map((a) => a.at)),
    results: answers.map((r) => ({
      status: r.status,
      ms: r.ms,
      id: idOf(r.text),
      error: r.status === 202 ? undefined : r.text.slice(0, 300),
    })),
  };
}

const probes = new Map();

async function probe(cmd) {
  const state = { stop: false, samples: [] };
  probes.set(cmd.probe, state);
  const headers = cmd.token ? { authorization: `Bearer ${cmd.token}` } : {};
  while (!state.stop) {
    const startedAt = Date.now();
    const r = await request(cmd.url, { headers });
    state.samples.push([startedAt, r.ms, r.status]);
    if (cmd.pauseMs) await new Promise((res) => setTimeout(res, cmd.pauseMs));
  }
  probes.delete(cmd.probe);
  return { samples: state.samples };
}

function runAutocannon(options) {
  return new Promise((resolve, reject) => {
    autocannon({ ...options, setupClient: undefined }, (err, result) => (err ? reject(err) : resolve(result)));
  });
}

async function handle(cmd) {
  switch (cmd.op) {
    case "autocannon": {
      const r = await runAutocannon(cmd.options);
      return {
        seconds: r.duration,
        ok: r["2xx"],
        non2xx: r.non2xx,
        errors: r.errors,
        timeouts: r.timeouts,
        latency: {
          p50: r.latency.p50,
          p90: r.latency.p90,
          p99: r.latency.p99,
          max: r.latency.max,
          mean: r.latency.mean,
        },
      };
    }
    case "uploads":
      return uploads(cmd);
    case "paced":
      return paced(cmd);
    case "probe":
      return probe(cmd);
    case "stop": {
      const state = probes.get(cmd.probe);
      if (state) state.stop = true;
      return {};
    }
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

process.on("message", (cmd) => {
  handle(cmd).then(
    (result) => process.send({ id: cmd.id, result }),
    (err) => process.send({ id: cmd.id, error: String(err?.stack ?? err) }),
  );
});
process.on("disconnect", () => process.exit(0));
