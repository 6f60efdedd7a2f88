import { stopTestInfra } from "../../deploy/local/dist/test-infra.js";

export default async function globalTeardown() {
  if (process.env.TEST_INFRA_STARTED === "1" && process.env.TEST_KEEP_INFRA !== "1") stopTestInfra();
}
