// Generated protobuf code, in one place for every service (regenerate with `npm run generate`).
export * as healthv1 from "./gen/grpc/health/v1/health_pb.js";
export * as rpcstatus from "./gen/google/rpc/status_pb.js";
export * as commonv1 from "./gen/pi/common/v1/common_pb.js";
export * as authv1 from "./gen/pi/auth/v1/auth_pb.js";
export * as connectionv1 from "./gen/pi/connection/v1/connection_pb.js";
export * as fileintakev1 from "./gen/pi/fileintake/v1/fileintake_pb.js";
export * as webhookv1 from "./gen/pi/webhook/v1/webhook_pb.js";
export * as eventsv1 from "./gen/pi/events/v1/events_pb.js";
