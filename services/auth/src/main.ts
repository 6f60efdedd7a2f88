import { runService } from "@pi/common/runtime/run-service";
import { startAuthService } from "./service.js";

runService("auth", startAuthService);
