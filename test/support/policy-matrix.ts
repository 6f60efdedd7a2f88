// Who may call whom in the chart (templates/networkpolicies.yaml), as components of the release and
// the port of the plane they reach (`<svc>-admin`: a service's admin port, its admin RPCs alone):
// auth <- gateway; auth-admin <- webhook, ops; connection <- gateway, file-intake; connection-admin
// <- ops; file-intake <- gateway; webhook <- gateway (health, for /readyz); webhook-admin <- ops;
// <svc>-mongodb <- <svc>; kafka <- every service; gateway <- the ingress controller only; ops <-
// nobody (the operator CLI's pod, entered by kubectl exec). Which RPCs a caller may make once
// connected is the services' allow-list of identities.
// For each caller, the targets it must reach and a set it must not.
export const componentPorts: Record<string, number> = {
  gateway: 8080,
  auth: 50051,
  connection: 50052,
  "file-intake": 50053,
  webhook: 50054,
  "auth-admin": 50061,
  "connection-admin": 50062,
  "webhook-admin": 50064,
  kafka: 9092,
  "auth-mongodb": 27017,
  "connection-mongodb": 27017,
  "file-intake-mongodb": 27017,
  "webhook-mongodb": 27017,
};
/** Every target: a component's port. */
export const components = Object.keys(componentPorts);
/** The component (pod) a target is a port of. */
export const componentOf = (target: string) => target.replace(/-admin$/, "");

const ADMIN_PORTS = ["auth-admin", "connection-admin", "webhook-admin"];
const DATABASES = ["auth-mongodb", "connection-mongodb", "file-intake-mongodb", "webhook-mongodb"];

export const admitted: Record<string, string[]> = {
  gateway: ["auth", "connection", "file-intake", "webhook", "kafka"],
  auth: ["auth-mongodb", "kafka"],
  connection: ["connection-mongodb", "kafka"],
  "file-intake": ["connection", "file-intake-mongodb", "kafka"],
  webhook: ["auth-admin", "webhook-mongodb", "kafka"],
  ops: ADMIN_PORTS,
};
export const refused: Record<string, string[]> = {
  // The internet-facing gateway reaches no admin port.
  gateway: [...DATABASES, ...ADMIN_PORTS],
  auth: ["gateway", "connection", "file-intake", "webhook", "connection-mongodb", ...ADMIN_PORTS],
  connection: ["gateway", "auth", "file-intake", "webhook", "auth-mongodb", ...ADMIN_PORTS],
  "file-intake": ["gateway", "auth", "webhook", "connection-mongodb", ...ADMIN_PORTS],
  // The webhook service: GetWebhookTarget on auth's admin port, nothing else of auth or any admin port.
  webhook: ["gateway", "auth", "connection", "file-intake", "file-intake-mongodb", "connection-admin", "webhook-admin"],
  // The operator CLI's pod: the admin ports, and nothing else (no data port, database, Kafka or gateway).
  ops: ["gateway", "auth", "connection", "file-intake", "webhook", "kafka", ...DATABASES],
};
