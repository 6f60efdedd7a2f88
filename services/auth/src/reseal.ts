import type { Logger } from "@pi/common/runtime/logger";
import type { SecretSealer } from "./secrets.js";
import type { AuthStore, PartnerDoc } from "./store.js";

/**
 * Re-seals at start every webhook signing secret not sealed by the newest KEK (the KeyRing re-seals its
 * keys); each write is conditional on the value read, and a secret that cannot be opened is logged and left.
 */
export async function resealStoredSecrets(store: AuthStore, sealer: SecretSealer, logger: Logger): Promise<void> {
  let resealed = 0;
  let failed = 0;
  const kind = "webhook-signing-secret";
  const again = async (sealed: string) =>
    sealer.isCurrent(sealed) ? sealed : sealer.seal(await sealer.unseal(sealed, kind), kind);
  const partners = await store.partners
    .find({}, { projection: { sealedSigningSecret: 1, previousSigningSecrets: 1 } })
    .toArray();
  for (const p of partners) {
    const previous = p.previousSigningSecrets ?? [];
    if (sealer.isCurrent(p.sealedSigningSecret) && previous.every((s) => sealer.isCurrent(s.sealed))) continue;
    try {
      const update: Partial<PartnerDoc> = { sealedSigningSecret: await again(p.sealedSigningSecret) };
      if (p.previousSigningSecrets)
        update.previousSigningSecrets = await Promise.all(
          previous.map(async (s) => ({ ...s, sealed: await again(s.sealed) })),
        );
      const filter = { _id: p._id, sealedSigningSecret: p.sealedSigningSecret };
      resealed += (await store.partners.updateOne(filter, { $set: update })).modifiedCount;
    } catch (err) {
      failed++;
      logger.warn(
        { partnerId: p._id, err: (err as Error).message },
        "a partner's signing secret could not be re-sealed",
      );
    }
  }
  if (resealed > 0 || failed > 0)
    logger.info({ resealed, failed }, "webhook signing secrets re-sealed with the newest DATA_KEYS key");
}
