import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { startTestReceiver, type TestReceiver } from "../support/webhook-receiver.js";

// Every service of the stack runs in this process, so one in-memory exporter sees the spans of
// all of them, exactly as each would export its own to a collector.
const exporter = new InMemorySpanExporter();
let stack: TestStack;
let receiver: TestReceiver;

beforeAll(async () => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  stack = await startTestStack();
  receiver = await startTestReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await stack?.stop();
  trace.disable();
  context.disable();
  propagation.disable();
});

const traceOf = (spans: ReadableSpan[], name: string) => spans.find((s) => s.name === name)?.spanContext().traceId;

describe("OpenTelemetry", () => {
  it("one trace id spans the gateway, the connection service and the webhook delivery of a caregiver approve", async () => {
    const ops = opsFor(stack.settings);
    const partner = await ops.partnerCreate({ name: "Traced Lab", webhookUrl: receiver.url });
    receiver.useSecret(partner.signing_secret);
    const elder = await ops.elderCreate();
    const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const created = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
    expect(created.status).toBe(202);

    await ops.connectionAct("approve", created.json!.id as string);
    await receiver.waitFor((a) => a.length >= 1, 20_000, "connection.approved");
    const spans = exporter.getFinishedSpans();
    const gatewayTrace = traceOf(spans, "POST /v1/connections");
    expect(gatewayTrace).toMatch(/^[0-9a-f]{32}$/);
    expect(traceOf(spans, "pi.connection.v1.ConnectionService/RequestConnection")).toBe(gatewayTrace);
    expect(traceOf(spans, "connection.approved")).toBe(gatewayTrace);
    expect(traceOf(spans, "publish connection.approved")).toBe(gatewayTrace);
    let delivery: ReadableSpan | undefined;
    for (let i = 0; i < 50 && !delivery; i++) {
      delivery = exporter.getFinishedSpans().find((s) => s.name === "webhook delivery");
      if (!delivery) await new Promise((r) => setTimeout(r, 100));
    }
    expect(delivery?.spanContext().traceId).toBe(gatewayTrace);
    expect(delivery?.attributes["http.response.status_code"]).toBe(204); // what the test receiver answers
  });

  it("a token request alone is one trace from the gateway to auth's IssueTokens (a batch of one is part of its request's trace)", async () => {
    const partner = await opsFor(stack.settings).partnerCreate({ name: "Traced Pharmacy" });
    exporter.reset();
    await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const spans = exporter.getFinishedSpans();
    const gatewayTrace = traceOf(spans, "POST /oauth/token");
    expect(gatewayTrace).toMatch(/^[0-9a-f]{32}$/);
    expect(traceOf(spans, "issue tokens")).toBe(gatewayTrace);
    expect(traceOf(spans, "pi.auth.v1.AuthService/IssueTokens")).toBe(gatewayTrace);
  });
});
