import { runService } from "@pi/common/run-service";
import { startConnectionService } from "./service.js";

runService("connection", startConnectionService);
