export { startWebhookService, type WebhookServiceOptions } from "./service.js";
