import type { ConnectRouter } from "@connectrpc/connect";
import { fileintakev1 } from "@pi/proto";
import { getFile, submitFile, type IntakeDeps } from "./intake.js";

export type FileIntakeDeps = IntakeDeps;

export default (deps: FileIntakeDeps) => (router: ConnectRouter) => {
  router.service(fileintakev1.FileIntakeService, {
    async submitFile(requests, ctx) {
      const file = await submitFile(deps, requests, ctx.signal);
      return { file: { id: file.id, status: fileintakev1.FileStatus.RECEIVED } };
    },
    async getFile(req) {
      return { file: await getFile(deps.store, req) };
    },
  });
};
