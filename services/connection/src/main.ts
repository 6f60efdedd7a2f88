import { runService } from "@pi/common/runtime/run-service";
import { startConnectionService } from "./service.js";

runService("connection", startConnectionService);
