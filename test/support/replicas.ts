import { healthv1 } from "@pi/proto";
import { LIVENESS } from "@pi/common/rpc/server";
import { serviceClient } from "@pi/common/rpc/client";
import { SERVICE_URL_SETTINGS, withLocalStackAddresses } from "../../deploy/local/src/state-files.js";

// Whether every replica of every internal service of a local stack serves. The stack's /readyz needs
// one replica of each; a second replica still joining its Kafka consumer groups (seen taking up to
// 12 s) is not yet listening, and callers then reach only the first.

const clients = new Map<string, ReturnType<typeof serviceClient<typeof healthv1.Health>>>();

/** Whether one replica's Connect server answers its health check (open to any caller). */
async function serving(url: string): Promise<boolean> {
  let health = clients.get(url);
  if (!health) {
    health = serviceClient(healthv1.Health, url);
    clients.set(url, health);
  }
  try {
    return (
      (await health.check({ service: LIVENESS }, { timeoutMs: 1_000 })).status ===
      healthv1.HealthCheckResponse_ServingStatus.SERVING
    );
  } catch {
    return false;
  }
}

/** The data-plane address of every replica, as the stack recorded them in its STATE_DIR. */
function replicaUrls(stateDir: string): string[] {
  const recorded = withLocalStackAddresses({}, stateDir);
  return SERVICE_URL_SETTINGS.filter((name) => name.endsWith("_SERVICE_URL")).flatMap(
    (name) => recorded[name]?.split(",") ?? [],
  );
}

export async function everyReplicaServes(stateDir: string): Promise<boolean> {
  return (await Promise.all(replicaUrls(stateDir).map(serving))).every(Boolean);
}
