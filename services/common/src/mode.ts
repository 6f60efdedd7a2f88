import { commonv1 } from "@pi/proto";

// A credential is live or test, and everything made with it carries its mode (spec: "Modes").
// Stores keep the mode's name; calls between services carry commonv1.Mode. This is the one mapping.

export type PartnerMode = "live" | "test";

export const isPartnerMode = (value: unknown): value is PartnerMode => value === "live" || value === "test";

/** The wire value of a mode. */
export const modeToProto = (mode: PartnerMode): commonv1.Mode =>
  mode === "test" ? commonv1.Mode.TEST : commonv1.Mode.LIVE;

/** The mode a wire value names; undefined for MODE_UNSPECIFIED or a number this build does not know. */
export function modeFromProto(mode: commonv1.Mode): PartnerMode | undefined {
  if (mode === commonv1.Mode.LIVE) return "live";
  if (mode === commonv1.Mode.TEST) return "test";
  return undefined;
}

/** The value a setting has in this mode (settings come in live and test pairs). */
export const forMode = <T>(values: { readonly live: T; readonly test: T }, mode: PartnerMode): T => values[mode];
