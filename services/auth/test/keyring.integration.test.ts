import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomBytes, randomUUID } from "node:crypto";
import { jwtVerify, createLocalJWKSet } from "jose";
import { connectMongo, type Mongo } from "@pi/common";
import { KeyRing, type KeySetDoc } from "../src/keys.js";
import { signAccessToken } from "../src/tokens.js";

// The key set on the real FerretDB: replicas agree on one key set, rotation keeps every key a
// live token may carry, retirement drops only keys whose tokens have all expired.

const pepper = randomBytes(32).toString("base64url");
const dbName = `t${randomUUID().slice(0, 8)}_keyring`;
let mongo: Mongo;

beforeAll(async () => {
  mongo = await connectMongo(process.env.TEST_MONGODB_URI!, dbName);
});
afterAll(async () => {
  await mongo?.db.dropDatabase();
  await mongo?.close();
});

const claims = { sub: "ptr_a", client_id: "cli_a", mode: "live" as const, scope: "files:write" };

describe("signing key set", () => {
  it("replicas starting together end up with one key set and sign alike", async () => {
    const keysets = mongo.db.collection<KeySetDoc>(`ks_${randomUUID().slice(0, 6)}`);
    const rings = [new KeyRing(keysets, pepper), new KeyRing(keysets, pepper), new KeyRing(keysets, pepper)];
    await Promise.all(rings.map((r) => r.load()));
    const kids = new Set(rings.map((r) => r.signer().kid));
    expect(kids.size).toBe(1);
    const token = await signAccessToken(rings[1]!, claims, 60);
    await expect(jwtVerify(token, createLocalJWKSet(rings[2]!.jwks()))).resolves.toBeDefined();
  });

  it("a rotated-in key is published at once, signs only from its activation, and the old key keeps verifying", async () => {
    const keysets = mongo.db.collection<KeySetDoc>(`ks_${randomUUID().slice(0, 6)}`);
    const ring = new KeyRing(keysets, pepper);
    const other = new KeyRing(keysets, pepper);
    await ring.load();
    await other.load();
    const before = ring.signer().kid;
    const oldToken = await signAccessToken(ring, claims, 60);
    const { added, retired } = await ring.rotate(60_000, 900_000);
    expect(retired).toEqual([]);
    expect(ring.jwks().keys.map((k) => k.kid)).toEqual([before, added.kid]);
    expect(ring.signer().kid).toBe(before);
    expect(ring.signer(Date.now() + 61_000).kid).toBe(added.kid);
    await other.load();
    expect(other.signer(Date.now() + 61_000).kid).toBe(added.kid);
    await expect(jwtVerify(oldToken, createLocalJWKSet(other.jwks()))).resolves.toBeDefined();
  });

  it("a rotation retires the keys whose tokens have all expired, and keeps the others", async () => {
    const keysets = mongo.db.collection<KeySetDoc>(`ks_${randomUUID().slice(0, 6)}`);
    const ring = new KeyRing(keysets, pepper);
    await ring.load();
    const first = ring.signer().kid;
    // Zero delay and zero lifetime: every rotation supersedes at once.
    const second = await ring.rotate(0, 0);
    await new Promise((r) => setTimeout(r, 5));
    const third = await ring.rotate(0, 0);
    expect(third.retired).toContain(first);
    const stored = await keysets.findOne({ _id: "jwt" });
    expect(stored!.keys.map((k) => k.kid)).not.toContain(first);
    expect(stored!.keys.map((k) => k.kid)).toContain(third.added.kid);
    expect(ring.jwks().keys.map((k) => k.kid)).not.toContain(first);
    expect(second.added.kid).not.toBe(third.added.kid);
  });

  it("two concurrent rotations lose no key", async () => {
    const keysets = mongo.db.collection<KeySetDoc>(`ks_${randomUUID().slice(0, 6)}`);
    const a = new KeyRing(keysets, pepper);
    const b = new KeyRing(keysets, pepper);
    await a.load();
    await b.load();
    const [ra, rb] = await Promise.all([a.rotate(60_000, 900_000), b.rotate(60_000, 900_000)]);
    const stored = await keysets.findOne({ _id: "jwt" });
    expect(stored!.keys.map((k) => k.kid)).toEqual(expect.arrayContaining([ra.added.kid, rb.added.kid]));
    expect(stored!.keys).toHaveLength(3);
  });
});
