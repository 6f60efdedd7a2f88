import type { Logger } from "@pi/common/runtime/logger";
import type { SecretSealer } from "./secrets.js";
import type { AuthStore } from "./store.js";

/** Re-seals at start every secret not sealed by the newest KEK (writes conditional on the value read); one that cannot be opened is logged and left. */
export async function resealStoredSecrets(
  store: AuthStore,
  sealer: SecretSealer,
  logger: Logger,
): Promise<{ resealed: number; failed: number }> {
  let resealed = 0;
  let failed = 0;
  const partners = await store.partners
    .find({}, { projection: { sealedSigningSecret: 1, previousSigningSecrets: 1 } })
    .toArray();
  for (const p of partners) {
    const previous = p.previousSigningSecrets ?? [];
    if (sealer.isCurrent(p.sealedSigningSecret) && previous.every((s) => sealer.isCurrent(s.sealed))) continue;
    try {
      const again = async (sealed: string) =>
        sealer.isCurrent(sealed)
          ? sealed
          : sealer.seal(await sealer.unseal(sealed, "webhook-signing-secret"), "webhook-signing-secret");
      const update = {
        sealedSigningSecret: await again(p.sealedSigningSecret),
        ...(p.previousSigningSecrets
          ? {
              previousSigningSecrets: await Promise.all(
                previous.map(async (s) => ({ ...s, sealed: await again(s.sealed) })),
              ),
            }
          : {}),
      };
      const res = await store.partners.updateOne(
        { _id: p._id, sealedSigningSecret: p.sealedSigningSecret },
        { $set: update },
      );
      resealed += res.modifiedCount;
    } catch (err) {
      failed++;
      logger.warn(
        { partnerId: p._id, err: (err as Error).message },
        "a partner's signing secret could not be re-sealed",
      );
    }
  }
  for (const k of await store.signingKeys.find({}, { projection: { sealedPrivateJwk: 1 } }).toArray()) {
    if (sealer.isCurrent(k.sealedPrivateJwk)) continue;
    try {
      const sealed = await sealer.seal(
        await sealer.unseal(k.sealedPrivateJwk, "token-signing-key"),
        "token-signing-key",
      );
      const res = await store.signingKeys.updateOne(
        { _id: k._id, sealedPrivateJwk: k.sealedPrivateJwk },
        { $set: { sealedPrivateJwk: sealed } },
      );
      resealed += res.modifiedCount;
    } catch (err) {
      failed++;
      logger.warn({ keyId: k._id, err: (err as Error).message }, "a token signing key could not be re-sealed");
    }
  }
  if (resealed > 0 || failed > 0)
    logger.info({ resealed, failed }, "stored secrets re-sealed with the newest DATA_KEYS key");
  return { resealed, failed };
}
