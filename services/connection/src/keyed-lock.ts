/**
 * Runs tasks one at a time per key (tasks under different keys run concurrently), in call order.
 *
 * Why the connection service needs it: FerretDB v1 (the MongoDB-compatible server of the tests and
 * the local stack) does not apply concurrent updates of one document atomically. Measured on
 * 1.24.2: eight concurrent `$push`es to one document kept fewer than eight entries in 19 rounds of
 * 20, and eight concurrent `findOneAndUpdate({_id, version: 0}, {$inc: {version: 1}})` returned a
 * document to several callers. So every write of a connection document goes through this lock
 * within the process; across replicas, MongoDB's per-document atomicity and the version guard do
 * the same job (docs/connections.md, "Concurrency").
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
