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
  // Internal calls' service tokens (service-identity.ts): refusals log the claimed caller, never these.
  '["pi-service-token"]',
  '*["pi-service-token"]',
  'req.headers["pi-service-token"]',
  // A workload's private key, should settings ever be logged.
  "SERVICE_IDENTITY_KEY",
  "*.SERVICE_IDENTITY_KEY",
  // A workload's Kafka password (KAFKA_PASSWORD), and the Kafka client's SASL options.
  "KAFKA_PASSWORD",
  "*.KAFKA_PASSWORD",
  "password",
  "*.password",
];

let stdout: DestinationStream | undefined;

/** How long a line may wait in the stdout buffer for more lines. */
export const LOG_FLUSH_MS = 250;

/** What flushWhenWritten needs of a destination (a SonicBoom). */
export interface FlushableDestination {
  write(data: string): boolean;
  flush(cb?: (err?: Error) => void): void;
}

/**
 * Arms one flush `ms` after the first line written since the last one, and none while nothing is
 * written. sonic-boom's own `periodicFlush` writes every period, lines or not: an empty write
 * through the thread pool four times a second in every idle process (issue 14's idle budget).
 */
export function flushWhenWritten<D extends FlushableDestination>(dest: D, ms = LOG_FLUSH_MS): D {
  let _timer: NodeJS.Timeout | undefined;
  const write = dest.write.bind(dest);
  dest.write = (data: string) => {
    const ok = write(data);
    _timer ??= setTimeout(() => {
      _timer = undefined;
      try {
        dest.flush();
      } catch {
        // destroyed: pino has written what was left at exit
      }
    }, ms).unref();
    return ok;
  };
  return dest;
}

/**
 * The process's one stdout destination. A write per line (the gateway's access log: one line per
 * request) cost 4-6% of the gateway's CPU, so lines are gathered and written asynchronously, 4 KiB
 * at a time or 250 ms after the first line still buffered, whichever comes first; pino writes what
 * is left synchronously when the process exits (process.exit included). Only a process killed
 * outright (SIGKILL) loses the lines of its last 250 ms.
 */
function stdoutDestination(): DestinationStream {
  stdout ??= flushWhenWritten(pino.destination({ dest: 1, sync: false, minLength: 4096 }));
  return stdout;
}

/** JSON lines on stdout, or on `destination` (tests capture log output through it). */
export function createLogger(
  service: string,
  level = process.env.LOG_LEVEL ?? "info",
  destination?: DestinationStream,
): Logger {
  const options = {
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: redactPaths, censor: "[redacted]" },
    formatters: { level: (label: string) => ({ level: label }) },
  };
  return pino(options, destination ?? stdoutDestination());
}
