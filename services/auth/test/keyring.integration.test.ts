import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomUUID } from "node:crypto";
import { jwtVerify, createLocalJWKSet } from "jose";
import { connectMongo, type Mongo } from "@pi/common/store/mongo";
import { LocalKeyWrapper, newDataKeysEntry } from "@pi/common/store/data-keys";
import { KeyRing, type SigningKeyDoc } from "../src/keys.js";
import { signAccessToken } from "../src/tokens.js";
import { SecretSealer } from "../src/secrets.js";

// The signing keys on the real MongoDB-wire server: replicas agree on the keys, rotation keeps every key a
// live token may carry, retirement drops only keys whose tokens have all expired.

const pepper = new SecretSealer(LocalKeyWrapper.fromSetting(newDataKeysEntry("k1")));
const dbName = `t${randomUUID().slice(0, 8)}_keyring`;
let mongo: Mongo;

beforeAll(async () => {
  mongo = await connectMongo(process.env.TEST_MONGODB_URI!, dbName);
});
afterAll(async () => {
  await mongo?.db.dropDatabase();
  await mongo?.close();
});

const who = { clientId: "cli_a", partnerId: "ptr_a", mode: "live" as const, scopes: ["files:write"] };
const freshCollection = () => mongo.db.collection<SigningKeyDoc>(`keys_${randomUUID().slice(0, 8)}`);

describe("signing keys", () => {
  it("replicas starting together end up with one first key and sign alike", async () => {
    const keys = freshCollection();
    const rings = [new KeyRing(keys, pepper), new KeyRing(keys, pepper), new KeyRing(keys, pepper)];
    await Promise.all(rings.map((r) => r.load()));
    expect(new Set(rings.map((r) => r.signer().kid)).size).toBe(1);
    expect(await keys.countDocuments()).toBe(1);
    const token = await signAccessToken(rings[1]!, who, "files:write", 60);
    await expect(jwtVerify(token, createLocalJWKSet(rings[2]!.jwks()))).resolves.toBeDefined();
  });

  it("a rotated-in key is published at once, signs only from its activation, and the old key keeps verifying", async () => {
    const keys = freshCollection();
    const ring = new KeyRing(keys, pepper);
    const other = new KeyRing(keys, pepper);
    await ring.load();
    await other.load();
    const before = ring.signer().kid;
    const oldToken = await signAccessToken(ring, who, "files:write", 60);
    const { added, retired } = await ring.rotate(60_000, 900_000);
    expect(retired).toEqual([]);
    expect(ring.jwks().keys.map((k) => k.kid)).toEqual([before, added.kid]);
    expect(ring.signer().kid).toBe(before);
    expect(ring.signer(Date.now() + 61_000).kid).toBe(added.kid);
    await other.load();
    expect(other.signer().kid).toBe(before);
    expect(other.signer(Date.now() + 61_000).kid).toBe(added.kid);
    await expect(jwtVerify(oldToken, createLocalJWKSet(other.jwks()))).resolves.toBeDefined();
  });

  it("a rotation retires the keys whose tokens have all expired, and keeps the others", async () => {
    const keys = freshCollection();
    const ring = new KeyRing(keys, pepper);
    await ring.load();
    const first = ring.signer().kid;
    // Zero delay and zero lifetime: every rotation supersedes the previous key at once.
    const second = await ring.rotate(0, 0);
    await new Promise((r) => setTimeout(r, 5));
    const third = await ring.rotate(0, 0);
    expect(second.retired).toEqual([first]);
    expect(third.retired).toEqual([second.added.kid]);
    expect((await keys.find().toArray()).map((k) => k.kid)).toEqual([third.added.kid]);
    expect(ring.jwks().keys.map((k) => k.kid)).toEqual([third.added.kid]);
    expect(ring.signer().kid).toBe(third.added.kid);
  });

  it("concurrent rotations on several replicas lose no key", async () => {
    const keys = freshCollection();
    const rings = [new KeyRing(keys, pepper), new KeyRing(keys, pepper), new KeyRing(keys, pepper)];
    await Promise.all(rings.map((r) => r.load()));
    const results = await Promise.all(rings.map((r) => r.rotate(60_000, 900_000)));
    const stored = (await keys.find().toArray()).map((k) => k.kid);
    expect(stored).toEqual(expect.arrayContaining(results.map((r) => r.added.kid)));
    expect(stored).toHaveLength(4);
  });
});
