import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectionv1, commonv1 } from "@pi/proto";
import { checkElderAddress, newId, sandboxElderAddress, serviceError, ErrorReason, type Logger, type Settings } from "@pi/common";
import type { ConnectionDoc, ConnectionStore } from "./store.js";
import { randomThreeWords } from "./words.js";

const { ConnectionService, ExternalStatus } = connectionv1;
const { Mode } = commonv1;

export interface ConnectionDeps {
  store: ConnectionStore;
  settings: Settings;
  logger: Logger;
}

function isDuplicateKey(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === 11000;
}

export default (deps: ConnectionDeps) => (router: ConnectRouter) => {
  const { store, settings } = deps;
  const domain = settings.ADDRESS_DOMAIN;
  const sandbox = sandboxElderAddress(domain);

  function addressOrThrow(value: string): string {
    const check = checkElderAddress(value, domain);
    if (!check.ok) throw serviceError(ErrorReason.INVALID_REQUEST, `elder ${check.reason}`, "elder");
    return check.address;
  }

  /** Test credentials resolve only the sandbox elder; live ones resolve every elder but it. */
  async function resolveElder(mode: "live" | "test", address: string): Promise<string | null> {
    if ((mode === "test") !== (address === sandbox)) return null;
    const elder = await store.elders.findOne({ address });
    return elder?._id ?? null;
  }

  router.service(ConnectionService, {
    async requestConnection(req) {
      const mode = req.mode === Mode.TEST ? "test" : req.mode === Mode.LIVE ? "live" : undefined;
      if (!mode) throw new ConnectError("mode is required", Code.InvalidArgument);
      const address = addressOrThrow(req.elderAddress);
      const elderId = await resolveElder(mode, address);
      const now = new Date();
      const upsert = () =>
        store.connections.findOneAndUpdate(
          { partnerId: req.partnerId, mode, address },
          {
            $setOnInsert: {
              _id: newId("con"),
              partnerId: req.partnerId,
              mode,
              address,
              elderId,
              status: "pending",
              createdAt: now,
              updatedAt: now,
            } satisfies ConnectionDoc,
          },
          { upsert: true, returnDocument: "after" },
        );
      let doc: ConnectionDoc | null;
      try {
        doc = await upsert();
      } catch (err) {
        // Two concurrent upserts can race to insert; the loser finds the winner's document.
        if (!isDuplicateKey(err)) throw err;
        doc = await upsert();
      }
      return { connection: { id: doc!._id, status: ExternalStatus.PENDING } };
    },

    async createElder(req) {
      const address = req.address !== undefined ? addressOrThrow(req.address) : `${randomThreeWords()}@${domain}`;
      if (address === sandbox) throw new ConnectError("the sandbox elder address is reserved", Code.InvalidArgument);
      const elderId = newId("eld");
      try {
        await store.elders.insertOne({ _id: elderId, address, createdAt: new Date() });
      } catch (err) {
        if (isDuplicateKey(err)) throw new ConnectError(`an elder already has the address ${address}`, Code.AlreadyExists);
        throw err;
      }
      return { elderId, address };
    },

    async getInfo() {
      return { addressDomain: domain, sandboxElderAddress: sandbox };
    },
  });
};
