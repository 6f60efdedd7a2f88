import { runService } from "@pi/common/runtime/run-service";
import { startExtractionService } from "./service.js";

runService("extraction", startExtractionService);
