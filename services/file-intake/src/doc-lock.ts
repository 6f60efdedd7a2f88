// FerretDB v1 (the MongoDB-compatible server of the tests and the local stack) applies an update as
// read, modify, write back, without isolation: two concurrent updates of one document can lose one
// of them (measured: 50 concurrent `$inc` of one field leave it at 10; `$set` of x and of y at once
// keep only one), and a filter such as `{leaseToken: t}` can be checked against a stale read (the
// SQLite handler does not run an update's query and write in one transaction: FerretDB issue #3040).
// Real MongoDB updates a document atomically. So that file-intake is correct on both, every update of a
// file record or an idempotency key made by this process goes through this lock, one at a time per
// document. (Two file-intake processes on one FerretDB could still race; a deployment on FerretDB
// runs one. The stuck sweep repairs a file a lost update left in `received`.)

import { KeyedLock } from "@pi/common";

const locks = new KeyedLock();

/** Runs `fn` once every earlier call for the same `key` in this process has finished. */
export function withDocLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
  return locks.run(key, fn);
}
