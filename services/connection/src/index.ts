export { startConnectionService } from "./service.js";
