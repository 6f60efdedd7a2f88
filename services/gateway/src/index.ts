export { startGateway, startWarmGateway } from "./service.js";
