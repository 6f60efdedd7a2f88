import { runService } from "@pi/common/run-service";
import { startExtractionService } from "./service.js";

runService("extraction", startExtractionService);
