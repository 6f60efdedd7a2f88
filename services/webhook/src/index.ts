export { startWebhookService } from "./service.js";
