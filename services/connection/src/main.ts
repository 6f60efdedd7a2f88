import { runService } from "@pi/common";
import { startConnectionService } from "./service.js";

runService("connection", startConnectionService);
