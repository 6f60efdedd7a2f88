import { ObjectId, type Collection, type Document } from "mongodb";

// How the database answers a query: from an index (or _id), or by scanning the collection. MongoDB
// says so through `explain`. The local server (mongo-java-server) has no `explain` command (it
// answers CommandNotFound, code 59); its rule, read in its source (AbstractMongoCollection and
// AbstractUniqueIndex.canHandle), is that a query is answered from a unique index, the _id index
// included, exactly when the filter's fields are that index's fields, each an equality; every
// other filter scans (its non-unique indexes are kept as definitions only: collStats reports them
// empty). So there the plan is derived from that rule, the index definitions and collStats.

export interface QueryPlan {
  via: "explain" | "mongo-java-server rule";
  usesIndex: boolean;
  /** The plan's stages (explain) or the index that serves the filter (the rule). */
  detail: string;
}

function stages(plan: Document | undefined, out: string[] = []): string[] {
  if (!plan) return out;
  if (typeof plan.stage === "string") out.push(plan.stage);
  stages(plan.inputStage as Document | undefined, out);
  for (const child of (plan.inputStages as Document[] | undefined) ?? []) stages(child, out);
  return out;
}

const isEquality = (v: unknown) => v === null || typeof v !== "object" || v instanceof ObjectId || v instanceof Date;

export async function queryPlan(collection: Collection<Document>, filter: Document): Promise<QueryPlan> {
  try {
    const explained = await collection.find(filter).explain("queryPlanner");
    const found = stages(explained.queryPlanner?.winningPlan as Document | undefined);
    return { via: "explain", usesIndex: found.length > 0 && !found.includes("COLLSCAN"), detail: found.join(" < ") };
  } catch (err) {
    if ((err as { code?: unknown }).code !== 59) throw err;
  }
  const fields = JSON.stringify(Object.keys(filter).sort());
  const indexes = await collection.listIndexes().toArray();
  const index = indexes.find(
    (ix) =>
      (ix.unique === true || ix.name === "_id_") && JSON.stringify(Object.keys(ix.key as Document).sort()) === fields,
  );
  const stats = await collection.db.command({ collStats: collection.collectionName });
  const entries = index ? Number((stats.indexSize as Record<string, number>)[index.name as string] ?? 0) : 0;
  return {
    via: "mongo-java-server rule",
    usesIndex: index !== undefined && Object.values(filter).every(isEquality) && entries > 0,
    detail: index
      ? `${index.name as string} (${entries} entries)`
      : "no unique index with exactly these fields: a scan",
  };
}
