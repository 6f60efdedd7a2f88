import { every, type Periodic } from "../background/periodic.js";
import type { Logger } from "./logger.js";
import type { Settings } from "./settings.js";

/** A key rotated in is published JWKS_REFRESH_SECONDS before it signs (docs/authentication.md). */
export function refreshSigningKeys(
  settings: Pick<Settings, "JWKS_REFRESH_SECONDS">,
  load: () => Promise<unknown>,
  logger: Logger,
): Periodic {
  return every("refreshing the token signing keys", settings.JWKS_REFRESH_SECONDS * 1000, load, logger, {
    runAtStart: false,
  });
}
