import { commonv1 } from "@pi/proto";

// A credential's mode (spec: "Modes"): stores keep its name, calls between services commonv1.Mode.

export type PartnerMode = "live" | "test";

export const isPartnerMode = (value: unknown): value is PartnerMode => value === "live" || value === "test";

export const modeToProto = (mode: PartnerMode): commonv1.Mode =>
  mode === "test" ? commonv1.Mode.TEST : commonv1.Mode.LIVE;

/** undefined for MODE_UNSPECIFIED or a number this build does not know. */
export function modeFromProto(mode: commonv1.Mode): PartnerMode | undefined {
  if (mode === commonv1.Mode.LIVE) return "live";
  if (mode === commonv1.Mode.TEST) return "test";
  return undefined;
}
