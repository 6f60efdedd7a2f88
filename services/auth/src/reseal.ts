import type { Logger } from "@pi/common/runtime/logger";
import type { SecretKind, SecretSealer } from "./secrets.js";
import type { AuthStore } from "./store.js";

/** Re-seals at start every secret not sealed by the newest KEK (writes conditional on the value read); one that cannot be opened is logged and left. */
export async function resealStoredSecrets(
  store: AuthStore,
  sealer: SecretSealer,
  logger: Logger,
): Promise<{ resealed: number; failed: number }> {
  let resealed = 0;
  let failed = 0;
  const again = async (sealed: string, kind: SecretKind) =>
    sealer.isCurrent(sealed) ? sealed : sealer.seal(await sealer.unseal(sealed, kind), kind);
  const reseal = async (what: string, ids: Record<string, string>, write: () => Promise<{ modifiedCount: number }>) => {
    try {
      resealed += (await write()).modifiedCount;
    } catch (err) {
      failed++;
      logger.warn({ ...ids, err: (err as Error).message }, `${what} could not be re-sealed`);
    }
  };
  const partners = await store.partners
    .find({}, { projection: { sealedSigningSecret: 1, previousSigningSecrets: 1 } })
    .toArray();
  for (const p of partners) {
    const previous = p.previousSigningSecrets ?? [];
    if (sealer.isCurrent(p.sealedSigningSecret) && previous.every((s) => sealer.isCurrent(s.sealed))) continue;
    await reseal("a partner's signing secret", { partnerId: p._id }, async () => {
      const update = {
        sealedSigningSecret: await again(p.sealedSigningSecret, "webhook-signing-secret"),
        ...(p.previousSigningSecrets
          ? {
              previousSigningSecrets: await Promise.all(
                previous.map(async (s) => ({ ...s, sealed: await again(s.sealed, "webhook-signing-secret") })),
              ),
            }
          : {}),
      };
      return store.partners.updateOne({ _id: p._id, sealedSigningSecret: p.sealedSigningSecret }, { $set: update });
    });
  }
  for (const k of await store.signingKeys.find({}, { projection: { sealedPrivateJwk: 1 } }).toArray()) {
    if (sealer.isCurrent(k.sealedPrivateJwk)) continue;
    await reseal("a token signing key", { keyId: k._id }, async () =>
      store.signingKeys.updateOne(
        { _id: k._id, sealedPrivateJwk: k.sealedPrivateJwk },
        { $set: { sealedPrivateJwk: await again(k.sealedPrivateJwk, "token-signing-key") } },
      ),
    );
  }
  if (resealed > 0 || failed > 0)
    logger.info({ resealed, failed }, "stored secrets re-sealed with the newest DATA_KEYS key");
  return { resealed, failed };
}
