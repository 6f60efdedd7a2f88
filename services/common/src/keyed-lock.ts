/**
 * Runs tasks one at a time per key (tasks under different keys run concurrently), in call order.
 *
 * Why services need it: FerretDB v1 (the MongoDB-compatible server of the tests and the local
 * stack) applies an update as read, modify, write back without isolation (FerretDB issue #3040).
 * Measured on 1.24.2: eight concurrent `$push`es to one document kept fewer than eight entries in
 * 19 rounds of 20; eight concurrent `findOneAndUpdate({_id, version: 0}, {$inc: {version: 1}})`
 * returned the document to several callers; 50 concurrent `$inc` of one field left it at 10. So the
 * connection and file-intake services write each document through a lock like this within their
 * process; across replicas, MongoDB's per-document atomicity and their version or lease guards do
 * the same job (docs/connections.md, docs/files.md).
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const done = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => done);
    this.tails.set(key, tail);
    await previous;
    try {
      return await task();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }

  /** Keys with a task running or waiting (for tests). */
  get size(): number {
    return this.tails.size;
  }
}
