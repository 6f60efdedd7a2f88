import type { StoreMigration } from "../store-versions.js";

// file-intake 0002. Release 4e36e67 opened a GridFS bucket `blobs` for the bytes of files stored
// before the `blob_segments` collection, creating its two collections with their indexes; no
// deployment stored bytes there (docs/upgrades.md), and no release since 1.0.0 reads it. The two
// collections are dropped when empty, so that the store holds only what its schema names; one that
// holds anything is kept, and said so.

export const BUCKET_COLLECTIONS = ["blobs.files", "blobs.chunks"] as const;

export const unusedGridfsBucket: StoreMigration = {
  name: "0002-drop-the-unused-gridfs-bucket",
  about: "drops the empty collections of the GridFS bucket `blobs` that 4e36e67 created",
  async up({ db, logger }) {
    const existing = new Set((await db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name));
    for (const name of BUCKET_COLLECTIONS) {
      if (!existing.has(name)) continue;
      const collection = db.collection(name);
      if ((await collection.countDocuments({}, { limit: 1 })) > 0) {
        logger.warn({ collection: name }, "kept: it holds GridFS documents, which no release since 1.0.0 reads");
        continue;
      }
      await collection.drop();
    }
  },
};
