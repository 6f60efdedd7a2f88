import type { StoreMigration } from "../store-versions.js";

// file-intake 0002 (docs/upgrades.md): drops the GridFS bucket `blobs` 4e36e67 created and no release
// since reads, collection by collection when empty; one that holds anything is kept, and said so.

export const unusedGridfsBucket: StoreMigration = {
  name: "0002-drop-the-unused-gridfs-bucket",
  about: "drops the empty collections of the GridFS bucket `blobs` that 4e36e67 created",
  async up({ db, logger }) {
    const existing = new Set((await db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name));
    for (const name of ["blobs.files", "blobs.chunks"]) {
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
