export { startFileIntakeService, DEFAULT_TIMING, type FileIntakeOptions, type FileIntakeTiming } from "./service.js";
