import { runService } from "@pi/common/run-service";
import { startGateway } from "./service.js";

runService("gateway", startGateway);
