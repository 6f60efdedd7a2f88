import { describe, expect, it } from "@jest/globals";
import { telemetryRequested } from "../src/runtime/telemetry.js";

describe("OpenTelemetry start-up", () => {
  it("is off when no OTEL_* variable names an exporter", () => {
    expect(telemetryRequested({})).toBe(false);
    expect(telemetryRequested({ OTEL_TRACES_EXPORTER: "none", OTEL_METRICS_EXPORTER: "none" })).toBe(false);
    expect(telemetryRequested({ OTEL_SERVICE_NAME: "x" })).toBe(false);
  });

  it("is on with an OTLP endpoint or a named exporter, unless the SDK is disabled", () => {
    expect(telemetryRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" })).toBe(true);
    expect(telemetryRequested({ OTEL_TRACES_EXPORTER: "console" })).toBe(true);
    // Metrics go to Prometheus without the SDK (metrics.ts).
    expect(telemetryRequested({ OTEL_METRICS_EXPORTER: "prometheus" })).toBe(false);
    expect(telemetryRequested({ OTEL_TRACES_EXPORTER: "console", OTEL_SDK_DISABLED: "true" })).toBe(false);
  });
});
