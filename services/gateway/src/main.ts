import { runService } from "@pi/common";
import { startGateway } from "./service.js";

runService("gateway", startGateway);
