import { MongoClient } from "mongodb";

/** The database a service owns: `${namespace}_${service}` on the configured server. */
export function databaseName(namespace: string, service: string): string {
  return `${namespace}_${service.replace(/-/g, "_")}`;
}

export type Mongo = Awaited<ReturnType<typeof connectMongo>>;

export async function connectMongo(uri: string, dbName: string) {
  const client = new MongoClient(uri, { serverSelectionTimeoutMS: 2000, connectTimeoutMS: 5000 });
  await client.connect();
  const db = client.db(dbName);
  return {
    client,
    db,
    ping: () =>
      db.command({ ping: 1 }, { timeoutMS: 2000 }).then(
        () => true,
        () => false,
      ),
    close: () => client.close(),
  };
}
