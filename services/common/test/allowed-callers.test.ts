import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "@jest/globals";
import { authv1, connectionv1, fileintakev1, webhookv1 } from "@pi/proto";
import { ALLOWED_CALLERS, mayCall, ruleFor, SERVICE_OF, WORKLOADS } from "../src/rpc/allowed-callers.js";

// The allow-list of internal calls (services/common/src/rpc/allowed-callers.ts): who may call which RPC.

const services = [
  authv1.AuthService,
  connectionv1.ConnectionService,
  fileintakev1.FileIntakeService,
  webhookv1.WebhookService,
];

describe("the allow-list of internal calls", () => {
  it("names every RPC of every internal service, and nothing else (a new RPC must be given its callers)", () => {
    expect(Object.keys(ALLOWED_CALLERS).sort()).toEqual(services.map((s) => s.typeName).sort());
    expect(Object.keys(SERVICE_OF).sort()).toEqual(services.map((s) => s.typeName).sort());
    for (const service of services) {
      expect(Object.keys(ALLOWED_CALLERS[service.typeName]!).sort()).toEqual(service.methods.map((m) => m.name).sort());
    }
  });

  it("every caller is a workload, every method has at least one, and no service calls itself", () => {
    for (const [service, methods] of Object.entries(ALLOWED_CALLERS)) {
      for (const rule of Object.values(methods)) {
        expect(rule.callers.length).toBeGreaterThan(0);
        for (const caller of rule.callers) expect(WORKLOADS).toContain(caller);
        expect(rule.callers).not.toContain(SERVICE_OF[service]);
      }
    }
  });

  it("the admin plane is the operator CLI's: every admin RPC but GetWebhookTarget is ops alone", () => {
    const admin = Object.entries(ALLOWED_CALLERS).flatMap(([service, methods]) =>
      Object.entries(methods)
        .filter(([, r]) => r.plane === "admin")
        .map(([method, r]) => [`${service}/${method}`, r.callers] as const),
    );
    expect(admin.length).toBeGreaterThanOrEqual(18);
    for (const [method, callers] of admin) {
      if (method === "pi.auth.v1.AuthService/GetWebhookTarget") expect(callers).toEqual(["webhook"]);
      else expect([method, callers]).toEqual([method, ["ops"]]);
    }
    // Runtime RPCs are never the operator's.
    for (const methods of Object.values(ALLOWED_CALLERS))
      for (const r of Object.values(methods)) if (r.plane === "runtime") expect(r.callers).not.toContain("ops");
  });

  it("the internet-facing gateway may call no admin RPC, only the partner API's runtime ones", () => {
    const gateway = Object.entries(ALLOWED_CALLERS).flatMap(([service, methods]) =>
      Object.entries(methods)
        .filter(([, r]) => r.callers.includes("gateway"))
        .map(([method, r]) => `${r.plane} ${service}/${method}`),
    );
    expect(gateway.sort()).toEqual(
      [
        "pi.auth.v1.AuthService/GetJwks",
        "pi.auth.v1.AuthService/IssueToken",
        "pi.auth.v1.AuthService/IssueTokens",
        "pi.auth.v1.AuthService/ListRevocations",
        "pi.auth.v1.AuthService/ReportGatewayPosition",
        "pi.connection.v1.ConnectionService/ActOnTestConnection",
        "pi.connection.v1.ConnectionService/GetConnection",
        "pi.connection.v1.ConnectionService/GetConnections",
        "pi.connection.v1.ConnectionService/RequestConnection",
        "pi.connection.v1.ConnectionService/RevokeConnection",
        "pi.fileintake.v1.FileIntakeService/CheckStorageQuota",
        "pi.fileintake.v1.FileIntakeService/GetFile",
        "pi.fileintake.v1.FileIntakeService/SubmitFile",
        "pi.webhook.v1.WebhookService/ListEvents",
      ].map((m) => `runtime ${m}`),
    );
  });

  it("mayCall: the examples of the security issue", () => {
    expect(mayCall("gateway", "pi.auth.v1.AuthService", "CreatePartner")).toBe(false);
    expect(mayCall("webhook", "pi.auth.v1.AuthService", "CreatePartner")).toBe(false);
    expect(mayCall("webhook", "pi.auth.v1.AuthService", "GetWebhookTarget")).toBe(true);
    expect(mayCall("gateway", "pi.auth.v1.AuthService", "GetWebhookTarget")).toBe(false);
    expect(mayCall("ops", "pi.auth.v1.AuthService", "CreatePartner")).toBe(true);
    expect(mayCall("file-intake", "pi.connection.v1.ConnectionService", "CheckActiveConnection")).toBe(true);
    expect(mayCall("gateway", "pi.connection.v1.ConnectionService", "ApproveConnection")).toBe(false);
    expect(mayCall("gateway", "pi.webhook.v1.WebhookService", "ResendEvent")).toBe(false);
    // Not listed: nobody, not even through inherited properties.
    expect(ruleFor("pi.auth.v1.AuthService", "DeleteEverything")).toBeUndefined();
    expect(ruleFor("pi.auth.v1.AuthService", "toString")).toBeUndefined();
    expect(mayCall("ops", "pi.other.v1.Other", "CreatePartner")).toBe(false);
  });

  it("docs/security.md shows exactly this table", () => {
    const rows = Object.entries(ALLOWED_CALLERS).flatMap(([service, methods]) =>
      Object.entries(methods).map(
        ([method, rule]) => `| ${SERVICE_OF[service]} | \`${method}\` | ${rule.plane} | ${rule.callers.join(", ")} |`,
      ),
    );
    const table = ["| service | RPC | plane | callers |", "|---|---|---|---|", ...rows].join("\n");
    expect(readFileSync(join(process.cwd(), "docs", "security.md"), "utf8")).toContain(table);
  });
});
