export interface DockerEngine {
  ok: boolean;
  reason?: string;
  /** Set when this process started dockerd (stopDockerEngine stops only that one). */
  startedPid?: number;
}
export interface ImageCheckResult {
  status: "passed" | "failed" | "skipped";
  reason?: string;
  image?: string;
  base?: string;
  cmdline?: string;
  healthz?: number;
  network?: "bridge" | "host";
  mode?: string;
  readyz?: { status?: number; body: string };
  containerLog?: string;
  timings: Record<string, number>;
}
export declare const repoRoot: string;
export declare const BASE_NPM_VERSION: string;
export declare function ensureDockerEngine(): DockerEngine;
export declare function stopDockerEngine(engine: DockerEngine | undefined): void;
export declare function ensureBaseImage(options?: { rebuild?: boolean }): string;
export declare function runImageCheck(options?: {
  contextDir?: string;
  service?: string;
  engine?: DockerEngine;
  noCache?: boolean;
  /** A MongoDB-compatible server and Kafka for an auth container beside the gateway (default: TEST_MONGODB_URI, TEST_KAFKA_BROKERS). */
  infra?: { mongoUri: string; kafkaBrokers: string };
}): Promise<ImageCheckResult>;
export function heapFlagsOfDockerfile(dockerfile?: string): string[];
