// Who may call whom in the chart (templates/networkpolicies.yaml), as components of the release:
// auth <- gateway, webhook, ops; connection <- gateway, file-intake, ops; file-intake <- gateway;
// webhook <- gateway (health, for /readyz), ops; <svc>-mongodb <- <svc>; kafka <- every service;
// gateway <- the ingress controller only; ops <- nobody (the operator CLI's pod, entered by kubectl
// exec). Which RPCs a caller may make once connected is the services' allow-list of identities.
// For each service, the components it must reach and a set it must not.
export const componentPorts: Record<string, number> = {
  gateway: 8080,
  auth: 50051,
  connection: 50052,
  "file-intake": 50053,
  webhook: 50054,
  kafka: 9092,
  "auth-mongodb": 27017,
  "connection-mongodb": 27017,
  "file-intake-mongodb": 27017,
  "webhook-mongodb": 27017,
};
export const components = Object.keys(componentPorts);

export const admitted: Record<string, string[]> = {
  gateway: ["auth", "connection", "file-intake", "webhook", "kafka"],
  auth: ["auth-mongodb", "kafka"],
  connection: ["connection-mongodb", "kafka"],
  "file-intake": ["connection", "file-intake-mongodb", "kafka"],
  webhook: ["auth", "webhook-mongodb", "kafka"],
  ops: ["auth", "connection", "webhook"],
};
export const refused: Record<string, string[]> = {
  gateway: ["auth-mongodb", "connection-mongodb", "file-intake-mongodb", "webhook-mongodb"],
  auth: ["gateway", "connection", "file-intake", "webhook", "connection-mongodb"],
  connection: ["gateway", "auth", "file-intake", "webhook", "auth-mongodb"],
  "file-intake": ["gateway", "auth", "webhook", "connection-mongodb"],
  webhook: ["gateway", "connection", "file-intake", "file-intake-mongodb"],
  // The operator CLI's pod: the admin RPCs' services, and nothing else (no database, no Kafka, no gateway).
  ops: ["gateway", "file-intake", "kafka", "auth-mongodb", "connection-mongodb", "file-intake-mongodb", "webhook-mongodb"],
};
