import { getPriority, setPriority } from "node:os";
import { runService } from "@pi/common/runtime/run-service";
import { startExtractionService } from "./service.js";

// Extraction is background work: this process, and with it the children that decode files, runs 10
// nicer than it was started, so that beside the processes that answer partners (`npm start`, or
// any host running it outside a container of its own) it takes the CPU they leave
// (docs/performance.md, "Uploads beside extraction").
setPriority(Math.min(19, getPriority() + 10));
runService("extraction", startExtractionService);
