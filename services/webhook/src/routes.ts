import type { ConnectRouter } from "@connectrpc/connect";
import { webhookv1 } from "@pi/proto";
import type { Logger, Settings } from "@pi/common";

export interface WebhookDeps {
  settings: Settings;
  logger: Logger;
}

// The RPCs of this service are filled in by their own issue; until then they answer Unimplemented.
export default (_deps: WebhookDeps) => (router: ConnectRouter) => {
  router.service(webhookv1.WebhookService, {});
};
