import type { ConnectRouter } from "@connectrpc/connect";
import { fileintakev1 } from "@pi/proto";
import type { Logger, Settings } from "@pi/common";

export interface FileIntakeDeps {
  settings: Settings;
  logger: Logger;
}

// The RPCs of this service are filled in by their own issue; until then they answer Unimplemented.
export default (_deps: FileIntakeDeps) => (router: ConnectRouter) => {
  router.service(fileintakev1.FileIntakeService, {});
};
