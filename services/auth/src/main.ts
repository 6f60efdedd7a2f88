import { runService } from "@pi/common/run-service";
import { startAuthService } from "./service.js";

runService("auth", startAuthService);
