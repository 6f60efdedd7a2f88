import { pino, type Logger } from "pino";

export type { Logger };

// Every secret-bearing field name that could reach a log line is censored here, once.
const redactPaths = [
  "client_secret",
  "clientSecret",
  "signing_secret",
  "signingSecret",
  "access_token",
  "accessToken",
  "authorization",
  "*.client_secret",
  "*.clientSecret",
  "*.signing_secret",
  "*.signingSecret",
  "*.access_token",
  "*.accessToken",
  "*.authorization",
  "req.headers.authorization",
];

export function createLogger(service: string, level = process.env.LOG_LEVEL ?? "info"): Logger {
  return pino({
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: redactPaths, censor: "[redacted]" },
    formatters: { level: (label) => ({ level: label }) },
  });
}
