import { runService } from "@pi/common";
import { startWebhookService } from "./service.js";

runService("webhook", startWebhookService);
