export { startFileIntakeService, type FileIntakeOptions } from "./service.js";
