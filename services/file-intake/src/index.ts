export { startFileIntakeService } from "./service.js";
