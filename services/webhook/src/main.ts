import { runService } from "@pi/common/runtime/run-service";
import { startWebhookService } from "./service.js";

runService("webhook", startWebhookService);
