import { describe, expect, it } from "@jest/globals";
import { randomBytes } from "node:crypto";
import type { Db } from "mongodb";
import {
  checkKeys,
  DataKeyError,
  decrypt,
  encrypt,
  LocalKeyWrapper,
  newDataKeysEntry,
  openSealedValue,
  parseDataKeys,
  SEAL_OVERHEAD,
  sealedKid,
  segmentAad,
  sealValue,
  type KeyCheckDoc,
} from "../src/store/data-keys.js";

const entry = (kid: string) => newDataKeysEntry(kid);
const flip = (b: Buffer, at: number) => {
  const c = Buffer.from(b);
  c[at]! ^= 1;
  return c;
};

describe("DATA_KEYS", () => {
  it("is kid:key pairs, newest first, keys of 32 bytes in base64 or base64url", () => {
    const std = randomBytes(32).toString("base64");
    const keks = parseDataKeys(`k2:${std},${entry("k1")}`);
    expect(keks.map((k) => k.kid)).toEqual(["k2", "k1"]);
    expect(keks[0]!.key.equals(Buffer.from(std, "base64"))).toBe(true);
    expect(keks.every((k) => k.key.length === 32)).toBe(true);
  });

  it.each([
    ["empty", ""],
    ["no id", `:${randomBytes(32).toString("base64")}`],
    ["no separator", randomBytes(32).toString("base64url")],
    ["an id with a dot", `k.1:${randomBytes(32).toString("base64url")}`],
    ["a short key", `k1:${randomBytes(16).toString("base64url")}`],
    ["a long key", `k1:${randomBytes(48).toString("base64url")}`],
    ["an id twice", `${entry("k1")},${entry("k1")}`],
    ["a trailing comma", `${entry("k1")},`],
  ])("refuses %s, naming no key", (_what, text) => {
    let message = "";
    try {
      parseDataKeys(text);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).not.toBe("");
    for (const part of text.split(/[,:]/)) if (part.length >= 20) expect(message).not.toContain(part);
  });
});

describe("key wrapping (KEK)", () => {
  it("wraps with the newest KEK and unwraps to the same data key; each wrap has its own nonce", async () => {
    const wrapper = LocalKeyWrapper.fromSetting(`${entry("k2")},${entry("k1")}`);
    const dataKey = randomBytes(32);
    const a = await wrapper.wrap(dataKey);
    const b = await wrapper.wrap(dataKey);
    expect(a.kid).toBe("k2");
    expect(a.wrapped).not.toBe(b.wrapped);
    expect(Buffer.from(a.wrapped, "base64url")).toHaveLength(32 + SEAL_OVERHEAD);
    expect((await wrapper.unwrap(a)).equals(dataKey)).toBe(true);
    expect(a.wrapped).not.toContain(dataKey.toString("base64url"));
  });

  it("rotation: after a new KEK is put in front, keys wrapped by the old one still unwrap, and new wraps use the new one", async () => {
    const old = entry("k1");
    const before = LocalKeyWrapper.fromSetting(old);
    const key = randomBytes(32);
    const wrapped = await before.wrap(key);
    const after = LocalKeyWrapper.fromSetting(`${entry("k2")},${old}`);
    expect((await after.unwrap(wrapped)).equals(key)).toBe(true);
    expect((await after.wrap(key)).kid).toBe("k2");
    expect(after.currentKid).toBe("k2");
  });

  it("a wrong kid is refused: unknown to DATA_KEYS, or naming another KEK than the one that wrapped", async () => {
    const wrapper = LocalKeyWrapper.fromSetting(`${entry("k2")},${entry("k1")}`);
    const wrapped = await wrapper.wrap(randomBytes(32));
    await expect(wrapper.unwrap({ ...wrapped, kid: "k9" })).rejects.toThrow(DataKeyError);
    await expect(wrapper.unwrap({ ...wrapped, kid: "k1" })).rejects.toThrow(DataKeyError);
  });

  it("the same kid with another key (a secret generated again) is refused, not silently accepted", async () => {
    const wrapped = await LocalKeyWrapper.fromSetting(entry("k1")).wrap(randomBytes(32));
    await expect(LocalKeyWrapper.fromSetting(entry("k1")).unwrap(wrapped)).rejects.toThrow(DataKeyError);
  });

  it("tampering with a wrapped key is detected, byte by byte", async () => {
    const wrapper = LocalKeyWrapper.fromSetting(entry("k1"));
    const wrapped = await wrapper.wrap(randomBytes(32));
    const raw = Buffer.from(wrapped.wrapped, "base64url");
    for (const at of [0, 11, 12, 30, raw.length - 1]) {
      await expect(wrapper.unwrap({ kid: "k1", wrapped: flip(raw, at).toString("base64url") })).rejects.toThrow(
        DataKeyError,
      );
    }
    await expect(wrapper.unwrap({ kid: "k1", wrapped: raw.subarray(0, 20).toString("base64url") })).rejects.toThrow(
      DataKeyError,
    );
  });

  it("only wraps 32-byte data keys", async () => {
    await expect(LocalKeyWrapper.fromSetting(entry("k1")).wrap(randomBytes(16))).rejects.toThrow(DataKeyError);
  });
});

describe("AES-256-GCM boxes", () => {
  const key = randomBytes(32);

  it("round-trip with a fresh nonce each time, and the plaintext nowhere in the box", () => {
    const text = Buffer.from("MARKER lab result: potassium 4.1 mmol/L");
    const a = encrypt(key, text, "ctx");
    const b = encrypt(key, text, "ctx");
    expect(a.equals(b)).toBe(false);
    expect(a).toHaveLength(text.length + SEAL_OVERHEAD);
    expect(a.includes(Buffer.from("MARKER"))).toBe(false);
    expect(decrypt(key, a, "ctx").equals(text)).toBe(true);
  });

  it("refuses another key, another context, a changed byte anywhere, and a truncated box", () => {
    const box = encrypt(key, Buffer.from("hello"), "ctx");
    expect(() => decrypt(randomBytes(32), box, "ctx")).toThrow(DataKeyError);
    expect(() => decrypt(key, box, "other")).toThrow(DataKeyError);
    for (let at = 0; at < box.length; at++) expect(() => decrypt(key, flip(box, at), "ctx")).toThrow(DataKeyError);
    expect(() => decrypt(key, box.subarray(0, box.length - 1), "ctx")).toThrow(DataKeyError);
    expect(() => decrypt(key, box.subarray(0, 5), "ctx")).toThrow(DataKeyError);
  });
});

describe("segmented streams (file chunks)", () => {
  const key = randomBytes(32);
  const segments = [Buffer.from("first"), Buffer.from("second"), Buffer.from("last")];
  const sealed = segments.map((s, n) => encrypt(key, s, segmentAad("blob1", n, n === segments.length - 1)));

  it("each segment opens at its own place", () => {
    expect(sealed.map((box, n) => decrypt(key, box, segmentAad("blob1", n, n === 2)).toString())).toEqual([
      "first",
      "second",
      "last",
    ]);
  });

  it("a segment moved to another place, or into another stream, does not open", () => {
    expect(() => decrypt(key, sealed[1]!, segmentAad("blob1", 0, false))).toThrow(DataKeyError);
    expect(() => decrypt(key, sealed[0]!, segmentAad("blob2", 0, false))).toThrow(DataKeyError);
  });

  it("a segment sealed into a buffer of the caller's opens the same, and leaves the rest of that buffer alone", () => {
    const into = Buffer.alloc(64, 0xee);
    const box = encrypt(key, Buffer.from("one two three"), segmentAad("blob1", 3, false), into);
    expect(box.length).toBe(13 + SEAL_OVERHEAD);
    expect(box.buffer).toBe(into.buffer);
    expect(decrypt(key, box, segmentAad("blob1", 3, false)).toString()).toBe("one two three");
    expect(into.subarray(box.length).every((b) => b === 0xee)).toBe(true);
    // Reused for the next segment: the first box is gone, the second opens.
    const next = encrypt(key, Buffer.from("four"), segmentAad("blob1", 4, true), into);
    expect(decrypt(key, next, segmentAad("blob1", 4, true)).toString()).toBe("four");
    expect(() => encrypt(key, Buffer.alloc(64 - SEAL_OVERHEAD + 1), segmentAad("blob1", 5, false), into)).toThrow(
      RangeError,
    );
  });

  it("a stream cut short does not open: its new last segment was not sealed final", () => {
    expect(() => decrypt(key, sealed[1]!, segmentAad("blob1", 1, true))).toThrow(DataKeyError);
    expect(() => decrypt(key, sealed[2]!, segmentAad("blob1", 2, false))).toThrow(DataKeyError);
  });
});

describe("sealed values (secrets, small documents)", () => {
  it("round-trip, name their KEK, and are bound to their context", async () => {
    const wrapper = LocalKeyWrapper.fromSetting(entry("k1"));
    const sealed = await sealValue(wrapper, "whsec_secret", "webhook-signing-secret");
    expect(sealed).toMatch(/^v2\.k1\./);
    expect(sealed).not.toContain("whsec_secret");
    expect(sealedKid(sealed)).toBe("k1");
    expect((await openSealedValue(wrapper, sealed, "webhook-signing-secret")).toString()).toBe("whsec_secret");
    await expect(openSealedValue(wrapper, sealed, "token-signing-key")).rejects.toThrow(DataKeyError);
  });

  it("after a rotation they still open, and a tampered one does not", async () => {
    const old = entry("k1");
    const sealed = await sealValue(LocalKeyWrapper.fromSetting(old), "s", "c");
    const rotated = LocalKeyWrapper.fromSetting(`${entry("k2")},${old}`);
    expect((await openSealedValue(rotated, sealed, "c")).toString()).toBe("s");
    expect(sealedKid(await sealValue(rotated, "s", "c"))).toBe("k2");
    const parts = sealed.split(".");
    parts[3] = flip(Buffer.from(parts[3]!, "base64url"), 14).toString("base64url");
    await expect(openSealedValue(rotated, parts.join("."), "c")).rejects.toThrow(DataKeyError);
    await expect(openSealedValue(rotated, "v1.a.b.c", "c")).rejects.toThrow(DataKeyError);
    expect(sealedKid("v1.abc.def.ghi")).toBeUndefined();
  });
});

/** The one collection checkKeys uses, in memory (a pure unit test: no database). */
function fakeDb() {
  const docs = new Map<string, KeyCheckDoc>();
  const collection = {
    findOne: async (f: { _id: string }) => docs.get(f._id) ?? null,
    insertOne: async (d: KeyCheckDoc) => {
      if (docs.has(d._id)) throw Object.assign(new Error("E11000"), { code: 11000 });
      docs.set(d._id, d);
    },
    find: () => ({ toArray: async () => [...docs.values()] }),
  };
  return { db: { collection: () => collection } as unknown as Db, docs };
}

describe("the start-up check of DATA_KEYS against the database", () => {
  it("records the current KEK once, passes the same keys, and reports a rotation's old key only when it is dropped", async () => {
    const { db, docs } = fakeDb();
    const k1 = entry("k1");
    expect(await checkKeys(db, LocalKeyWrapper.fromSetting(k1))).toEqual({ mismatched: [], missing: [] });
    expect(await checkKeys(db, LocalKeyWrapper.fromSetting(k1))).toEqual({ mismatched: [], missing: [] });
    const k2 = entry("k2");
    expect(await checkKeys(db, LocalKeyWrapper.fromSetting(`${k2},${k1}`))).toEqual({ mismatched: [], missing: [] });
    expect([...docs.keys()].sort()).toEqual(["k1", "k2"]);
    expect(await checkKeys(db, LocalKeyWrapper.fromSetting(k2))).toEqual({ mismatched: [], missing: ["k1"] });
  });

  it("names a key that is not the one that wrote under its id (a secret generated again)", async () => {
    const { db } = fakeDb();
    await checkKeys(db, LocalKeyWrapper.fromSetting(entry("k1")));
    expect(await checkKeys(db, LocalKeyWrapper.fromSetting(entry("k1")))).toEqual({ mismatched: ["k1"], missing: [] });
  });
});
