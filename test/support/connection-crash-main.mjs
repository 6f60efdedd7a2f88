// The connection service as services/connection/dist/main.js runs it, with one test seam: the process
// kills itself (SIGKILL, as a crash would) right after a write that stored an event, before its
// publish. Only test/e2e/crashes-and-replicas.test.ts starts it.
import { runService } from "@pi/common/runtime/run-service";
import { startConnectionService } from "../../services/connection/dist/service.js";

runService("connection", (settings, logger) =>
  startConnectionService(settings, logger, {
    beforePublish: (connectionId) => {
      logger.warn({ connectionId }, "crash test: killing the process before the publish");
      process.kill(process.pid, "SIGKILL");
    },
  }),
);
