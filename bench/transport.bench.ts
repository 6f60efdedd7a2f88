import { it } from "@jest/globals";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { report } from "./report.js";

// What one internal call costs by protocol and by library (connect-node, and grpc-js serving the
// services' grpc-js server and client, services/common/src/rpc/, as the services do),
// against a bare node:http2 request of the same bytes (bench/drivers/transport-hop.mjs): the hop that bounds POST /oauth/token's ratio (a gateway
// calling an auth service; system.bench.ts measures that floor with the services' own contract).

interface Hop {
  name: string;
  callsPerSecond: number;
  clientCpuMsPerCall: number;
  serverCpuMsPerCall: number;
}

it("one unary call, empty handler: gRPC through connect-node and grpc-js, the Connect protocol, against a bare HTTP/2 request", () => {
  const out = execFileSync(process.execPath, [join(process.cwd(), "bench", "drivers", "transport-hop.mjs")], {
    encoding: "utf8",
    timeout: 120_000,
  });
  const hops: Hop[] = out
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as Hop);
  const bare = hops.find((h) => h.name.startsWith("bare"))!;
  const bareCpu = bare.clientCpuMsPerCall + bare.serverCpuMsPerCall;
  for (const h of hops) {
    const cpu = h.clientCpuMsPerCall + h.serverCpuMsPerCall;
    report(`one unary call: ${h.name}`, {
      "calls/s (8 in flight)": h.callsPerSecond,
      "client CPU ms per call": h.clientCpuMsPerCall,
      "server CPU ms per call": h.serverCpuMsPerCall,
      "CPU per call against the bare request": cpu / bareCpu,
    });
  }
}, 180_000);
