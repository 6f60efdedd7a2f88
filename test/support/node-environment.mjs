// The jest environment of every lane: Node's, with one repair. jest-circus makes an
// AsyncLocalStorage in every test file and never disables it; an enabled storage stays in Node's
// process-wide list, and every promise of every later file in the worker pays for each one (an
// `await` cost 15 times more after 30 files). The storages a file enabled are disabled when it ends.
// (Node 20's storages; later ones keep no such list and have no _enable.)
import { AsyncLocalStorage } from "node:async_hooks";
import { TestEnvironment } from "jest-environment-node";

const RUNNING = Symbol.for("pi.test-environment.storages");

/** Patches AsyncLocalStorage once per process (jest may load this module more than once). */
function trackStorages() {
  const enable = AsyncLocalStorage.prototype._enable;
  if (typeof enable !== "function" || Object.hasOwn(AsyncLocalStorage, RUNNING)) return;
  AsyncLocalStorage[RUNNING] = null;
  AsyncLocalStorage.prototype._enable = function trackedEnable(...args) {
    AsyncLocalStorage[RUNNING]?.add(this);
    return enable.apply(this, args);
  };
}

export default class NodeEnvironment extends TestEnvironment {
  #storages = new Set();

  async setup() {
    await super.setup();
    trackStorages();
    AsyncLocalStorage[RUNNING] = this.#storages;
  }

  async teardown() {
    if (AsyncLocalStorage[RUNNING] === this.#storages) AsyncLocalStorage[RUNNING] = null;
    for (const storage of this.#storages) storage.disable();
    await super.teardown();
  }
}
