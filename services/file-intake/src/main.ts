import { runService } from "@pi/common";
import { startFileIntakeService } from "./service.js";

runService("file-intake", startFileIntakeService);
