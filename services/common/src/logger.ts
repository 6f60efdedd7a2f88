import { pino, type DestinationStream, type Logger } from "pino";

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

/** JSON lines on stdout, or on `destination` (tests capture log output through it). */
export function createLogger(service: string, level = process.env.LOG_LEVEL ?? "info", destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: redactPaths, censor: "[redacted]" },
    formatters: { level: (label: string) => ({ level: label }) },
  };
  return destination ? pino(options, destination) : pino(options);
}
