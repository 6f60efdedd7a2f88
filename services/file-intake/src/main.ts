import { runService } from "@pi/common/run-service";
import { startFileIntakeService } from "./service.js";

runService("file-intake", startFileIntakeService);
