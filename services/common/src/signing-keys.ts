import { every, type Periodic } from "./background/periodic.js";
import type { Logger } from "./logger.js";
import type { Settings } from "./settings.js";

/**
 * Reads the token signing keys again every JWKS_REFRESH_SECONDS: a key rotated in is published that
 * long before it signs (docs/authentication.md), so every holder has it before its first token.
 */
export function refreshSigningKeys(
  settings: Pick<Settings, "JWKS_REFRESH_SECONDS">,
  load: () => Promise<unknown>,
  logger: Logger,
): Periodic {
  return every("refreshing the token signing keys", settings.JWKS_REFRESH_SECONDS * 1000, load, logger, {
    runAtStart: false,
  });
}
