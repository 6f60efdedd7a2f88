import { runService } from "@pi/common/runtime/run-service";
import { startGateway } from "./service.js";

runService("gateway", startGateway);
