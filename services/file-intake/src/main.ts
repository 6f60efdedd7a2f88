import { runService } from "@pi/common/runtime/run-service";
import { startFileIntakeService } from "./service.js";

runService("file-intake", startFileIntakeService);
