import { runService } from "@pi/common/run-service";
import { startWebhookService } from "./service.js";

runService("webhook", startWebhookService);
