import { randomInt } from "node:crypto";
import { wordlist } from "@scure/bip39/wordlists/english.js";
import { ErrorReason, RpcError, serviceError, Status } from "@pi/common/rpc/errors";
import { MAX_REQUESTS_PER_BATCH } from "@pi/common/rpc/clients";
import type { Router } from "@pi/common/rpc/server";
import { connectionv1, type commonv1 } from "@pi/proto";
import { checkElderAddress } from "@pi/common/rules/elder-address";
import { insertIfNew } from "@pi/common/store/persistence";
import { newId } from "@pi/common/rules/ids";
import type { AuditFields, AuditTrail } from "@pi/common/store/audit";
import type { Settings } from "@pi/common/runtime/settings";
import { modeFromProto } from "@pi/common/rules/mode";
import { ACT_ID } from "./acts.js";
import { connectionAudit, partnerActor } from "./audit.js";
import type { Applied, Connections, OwnedFilter } from "./connections.js";
import {
  effectiveStatus,
  type ConnectionMode,
  type ExternalStatus,
  type InternalStatus,
  type TestHelperTrigger,
  type Trigger,
} from "./state-machine.js";
import type { ConnectionDoc, ConnectionStore } from "./store.js";

const { ConnectionService, ExternalStatus: External, InternalStatus: Internal, TestHelperAct } = connectionv1;

export interface ConnectionDeps {
  store: ConnectionStore;
  connections: Connections;
  settings: Settings;
  /** Records what changes nothing (a caregiver's refused or repeated act, a refused elder); changes record themselves. */
  trail: Pick<AuditTrail, "entry" | "record" | "refusals">;
  afterElder: (address: string) => void;
}

/** A fresh random three-word local part from the BIP-39 English list (2048 words, a-z only). */
const randomThreeWords = () => [0, 1, 2].map(() => wordlist[randomInt(wordlist.length)]).join(".");

/** The shape of every id newId("con") makes; anything else cannot name a connection. */
export const CONNECTION_ID = /^con_[0-9A-Za-z]{1,64}$/;

const externalEnum = (status: ExternalStatus) => External[status.toUpperCase() as Uppercase<ExternalStatus>];
const internalEnum = (status: InternalStatus) => Internal[status.toUpperCase() as Uppercase<InternalStatus>];

function modeOf(mode: commonv1.Mode): ConnectionMode {
  const name = modeFromProto(mode);
  if (name) return name;
  throw new RpcError("mode is required", Status.INVALID_ARGUMENT);
}

export default (deps: ConnectionDeps) => (router: Router) => {
  const { store, connections, settings, trail } = deps;
  const domain = settings.ADDRESS_DOMAIN;

  function addressOrThrow(value: string): string {
    const check = checkElderAddress(value, domain);
    if (!check.ok) throw serviceError(ErrorReason.INVALID_REQUEST, `elder ${check.reason}`, "elder");
    return check.address;
  }

  const partnerView = (doc: ConnectionDoc) => ({
    connection: { id: doc._id, status: externalEnum(connections.external(doc)) },
  });

  // Unknown, malformed and another partner's (or the other mode's) ids: one error, one query shape.
  const notFound = () => serviceError(ErrorReason.NOT_FOUND, "no such connection");
  /** null for an id no connection can have, and for no partner. */
  function ownedOrNone(req: { partnerId: string; id: string; mode: commonv1.Mode }): OwnedFilter | null {
    const mode = modeOf(req.mode);
    return CONNECTION_ID.test(req.id) && req.partnerId !== "" ? { _id: req.id, partnerId: req.partnerId, mode } : null;
  }
  function ownedFilter(req: { partnerId: string; id: string; mode: commonv1.Mode }): OwnedFilter {
    const filter = ownedOrNone(req);
    if (!filter) throw notFound();
    return filter;
  }

  /**
   * Records an act that changed nothing (a change was recorded with it, connections.ts): not found,
   * refused, or found as asked. A repeat of an act id already applied records nothing.
   */
  async function recordNoChange(applied: Applied | null, fields: AuditFields): Promise<void> {
    if (!applied) await trail.record({ ...fields, refused: { code: "not_found" } });
    else if (applied.outcome.kind === "refused")
      await trail.record({ ...fields, refused: { code: "failed_precondition", rule: applied.outcome.reason } });
    else if (applied.outcome.kind === "unchanged" && !applied.replayed) await trail.record(fields);
  }

  async function caregiverAct(
    { id, actId }: { id: string; actId?: string },
    trigger: Extract<Trigger, "approve" | "decline" | "sever">,
  ) {
    if (actId !== undefined && !ACT_ID.test(actId))
      throw new RpcError("act_id must look like act_ followed by up to 64 letters and digits", Status.INVALID_ARGUMENT);
    const applied = CONNECTION_ID.test(id) ? await connections.apply({ _id: id }, trigger, { actId }) : null;
    const targets = [id, applied?.doc.partnerId, applied?.doc.elderId];
    await recordNoChange(applied, { action: `connection.${trigger}`, actor: "caregiver", targets });
    if (!applied) throw new RpcError(`no connection ${id}`, Status.NOT_FOUND);
    if (applied.outcome.kind === "refused")
      throw new RpcError(`cannot ${trigger} ${id}: ${applied.outcome.reason}`, Status.FAILED_PRECONDITION);
    // A repeat of an act already applied (the same act id) answers what the act did.
    const status = applied.replayed?.status ?? effectiveStatus(connections.stateOf(applied.doc), connections.timing());
    return { result: { id, internalStatus: internalEnum(status) } };
  }

  /** A partner's test helper on its own test connection; anything else is the one NOT_FOUND of ownedFilter. */
  async function testHelperAct(req: connectionv1.ActOnTestConnectionRequest) {
    // TestHelperAct.APPROVE is the trigger "test_approve", and so on; UNSPECIFIED (0) is no act.
    const act = req.act ? TestHelperAct[req.act] : undefined;
    if (!act) throw new RpcError("act is required", Status.INVALID_ARGUMENT);
    const trigger = `test_${act.toLowerCase()}` as TestHelperTrigger;
    const filter = ownedFilter(req);
    if (filter.mode !== "test") throw notFound();
    const applied = await connections.apply(filter, trigger);
    const elderId = applied?.doc.elderId ?? null;
    await recordNoChange(applied, connectionAudit(trigger, { _id: req.id, partnerId: req.partnerId }, elderId));
    if (!applied) throw notFound();
    if (applied.outcome.kind === "refused") {
      const rule = applied.outcome.reason;
      throw serviceError(ErrorReason.INVALID_REQUEST, `${rule.charAt(0).toUpperCase()}${rule.slice(1)}.`);
    }
    return partnerView(applied.doc);
  }

  router.service(ConnectionService, {
    async requestConnection(req) {
      const mode = modeOf(req.mode);
      const address = addressOrThrow(req.elderAddress);
      if (req.partnerId === "") throw new RpcError("partner_id is required", Status.INVALID_ARGUMENT);
      partnerActor(req.partnerId);
      return partnerView(await connections.request(req.partnerId, mode, address));
    },

    async getConnection(req) {
      // No read lease (lease_ms 0): a 1.0.0 gateway asking for one reads through.
      const doc = await connections.read(ownedFilter(req));
      if (!doc) throw notFound();
      return partnerView(doc);
    },

    async getConnections(req) {
      if (req.requests.length > MAX_REQUESTS_PER_BATCH)
        throw new RpcError(`at most ${MAX_REQUESTS_PER_BATCH} requests per call`, Status.INVALID_ARGUMENT);
      const docs = await connections.readMany(req.requests.map(ownedOrNone));
      return { responses: docs.map((doc) => (doc ? partnerView(doc) : {})) };
    },

    async revokeConnection(req) {
      const applied = await connections.apply(ownedFilter(req), "delete");
      if (!applied) throw notFound();
      return partnerView(applied.doc);
    },

    async checkActiveConnection(req) {
      const mode = modeOf(req.mode);
      const address = addressOrThrow(req.elderAddress);
      return { active: req.partnerId !== "" && (await connections.isActive(req.partnerId, mode, address)) };
    },

    actOnTestConnection: (req) => testHelperAct(req),

    approveConnection: (req) => caregiverAct(req, "approve"),
    declineConnection: (req) => caregiverAct(req, "decline"),
    severConnection: (req) => caregiverAct(req, "sever"),

    // Its record names the elder by id only, never by address.
    createElder: (req) =>
      trail.refusals({ action: "elder.create", actor: "operator", targets: [] }, async () => {
        const address = req.address !== undefined ? addressOrThrow(req.address) : `${randomThreeWords()}@${domain}`;
        if (address === connections.sandbox)
          throw new RpcError("the sandbox elder address is reserved", Status.INVALID_ARGUMENT);
        const elderId = newId("eld");
        const audit = [trail.entry({ action: "elder.create", actor: "operator", targets: [elderId] })];
        if (!(await insertIfNew(store.elders, { _id: address, elderId, createdAt: new Date(), audit }))) {
          throw new RpcError(`an elder already has the address ${address}`, Status.ALREADY_EXISTS);
        }
        deps.afterElder(address);
        return { elderId, address };
      }),

    async getInfo() {
      return { addressDomain: domain, sandboxElderAddress: connections.sandbox };
    },
  });
};
