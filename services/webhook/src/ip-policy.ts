// Which addresses a webhook may be sent to: the egress policy of @pi/common (egress.ts), which JWK Set URLs share.
export { addressRefusal, isPublicAddress } from "@pi/common/egress";
