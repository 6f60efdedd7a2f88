import { runService } from "@pi/common";
import { startExtractionService } from "./service.js";

runService("extraction", startExtractionService);
