import { runService } from "@pi/common";
import { startAuthService } from "./service.js";

runService("auth", startAuthService);
