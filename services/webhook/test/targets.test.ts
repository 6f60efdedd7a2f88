import { describe, expect, it } from "@jest/globals";
import { create } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import { createLogger } from "@pi/common/runtime/logger";
import { applyPartnerEvent } from "../src/targets.js";

const logger = createLogger("targets-test", "silent");
const event = (kind: eventsv1.PartnerEventKind) =>
  create(eventsv1.PartnerEventSchema, { kind, partnerId: "ptr_1", clientId: "cli_1" });

describe("a webhook replica's cached targets under partner events", () => {
  it("a changed webhook drops the partner's cached target; other partner events leave it", () => {
    const forgotten: string[] = [];
    const cache = { forget: (id: string) => void forgotten.push(id) };
    for (const kind of [
      eventsv1.PartnerEventKind.CREDENTIAL_REVOKED,
      eventsv1.PartnerEventKind.PARTNER_SUSPENDED,
      eventsv1.PartnerEventKind.PARTNER_REINSTATED,
    ]) {
      applyPartnerEvent(cache, event(kind), logger);
    }
    expect(forgotten).toEqual([]);
    applyPartnerEvent(cache, event(eventsv1.PartnerEventKind.WEBHOOK_CHANGED), logger);
    expect(forgotten).toEqual(["ptr_1"]);
  });
});
