import { connectionClockOffset, connectionReadLeasesSuspended } from "@pi/common/metrics";
import type { Logger } from "@pi/common/logger";

// Read leases compare times written by different replicas (leasedUntil, fencedUntil): they are kept
// on the database's clock, which every replica measures its own against (docs/connections.md, "Read
// leases", "Clocks"). The rules are pure; DatabaseClock holds the last measurement.

/** One reading of the database's clock: the local clock before the query, the database's answer, the local clock after. */
export interface ClockSample {
  sentAt: number;
  databaseNow: number;
  receivedAt: number;
}

export interface MeasuredOffset {
  /** Local clock minus the database's: positive when this replica's clock is ahead. */
  offsetMs: number;
  /** Half the round trip of the sample it came from: the database read its clock somewhere within it. */
  uncertaintyMs: number;
  /** Local time of the measurement. */
  measuredAt: number;
}

export interface ClockRules {
  /** The most a replica's clock may be off the database's, uncertainty included, while it grants leases. */
  limitMs: number;
  /** A measurement older than this vouches for nothing (the database did not answer since). */
  maxAgeMs: number;
}

/** The offset from the sample of the shortest round trip (the least uncertain); null without samples. */
export function offsetFrom(samples: readonly ClockSample[]): MeasuredOffset | null {
  let best: ClockSample | undefined;
  for (const s of samples) if (!best || s.receivedAt - s.sentAt < best.receivedAt - best.sentAt) best = s;
  if (!best) return null;
  const midpoint = (best.sentAt + best.receivedAt) / 2;
  return {
    offsetMs: midpoint - best.databaseNow,
    uncertaintyMs: (best.receivedAt - best.sentAt) / 2,
    measuredAt: best.receivedAt,
  };
}

/** Whether this replica may grant read leases: a recent measurement puts its clock within the limit of the database's. */
export function clockTrusted(measured: MeasuredOffset | null, localNow: number, rules: ClockRules): boolean {
  if (!measured || localNow - measured.measuredAt > rules.maxAgeMs || localNow < measured.measuredAt) return false;
  return Math.abs(measured.offsetMs) + measured.uncertaintyMs <= rules.limitMs;
}

/** The database's time at local time `localNow`: the local clock corrected by the last measurement (uncorrected before any). */
export function databaseTime(measured: MeasuredOffset | null, localNow: number): number {
  return localNow - (measured?.offsetMs ?? 0);
}

/**
 * Each measurement reads the database's clock until one round trip took at most QUICK_ROUND_TRIP_MS
 * (then its uncertainty is at most half that), at most MAX_SAMPLES times; the reading of the
 * shortest round trip counts. On a busy machine a single slow round trip would otherwise suspend
 * leases on a clock that is right.
 */
const QUICK_ROUND_TRIP_MS = 20;
const MAX_SAMPLES = 5;

/**
 * This replica's view of the database's clock. `measure()` runs at start and then periodically
 * (service.ts); between measurements, `now()` is the local clock corrected by the last offset, and
 * `leasesAllowed()` says whether the replica may grant read leases. Crossing the limit either way is
 * logged, and the gauges pi_connection_clock_offset_seconds and pi_connection_read_leases_suspended
 * follow every measurement.
 */
export class DatabaseClock {
  private measured: MeasuredOffset | null = null;
  private suspended: boolean | undefined;

  constructor(
    /** Reads the database's clock once. */
    private readonly readDatabaseNow: () => Promise<Date>,
    private readonly localNow: () => Date,
    private readonly rules: ClockRules,
    private readonly logger?: Pick<Logger, "warn" | "info">,
  ) {}

  async measure(): Promise<MeasuredOffset | null> {
    const samples: ClockSample[] = [];
    try {
      for (let i = 0; i < MAX_SAMPLES; i++) {
        const sentAt = this.localNow().getTime();
        const databaseNow = (await this.readDatabaseNow()).getTime();
        const receivedAt = this.localNow().getTime();
        samples.push({ sentAt, databaseNow, receivedAt });
        if (receivedAt - sentAt <= QUICK_ROUND_TRIP_MS) break;
      }
    } finally {
      const measured = offsetFrom(samples);
      if (measured) this.measured = measured;
      this.report();
    }
    return this.measured;
  }

  /** The database's time now, as this replica reckons it. */
  now(): Date {
    return new Date(databaseTime(this.measured, this.localNow().getTime()));
  }

  leasesAllowed(): boolean {
    return clockTrusted(this.measured, this.localNow().getTime(), this.rules);
  }

  private report(): void {
    const allowed = this.leasesAllowed();
    const m = this.measured;
    if (m) connectionClockOffset.set(m.offsetMs / 1000);
    connectionReadLeasesSuspended.set(allowed ? 0 : 1);
    if (this.suspended === !allowed) return;
    const first = this.suspended === undefined;
    this.suspended = !allowed;
    const fields = {
      offsetMs: m ? Math.round(m.offsetMs) : null,
      uncertaintyMs: m ? Math.round(m.uncertaintyMs) : null,
      limitMs: this.rules.limitMs,
    };
    if (!allowed)
      this.logger?.warn(
        fields,
        "clock beyond the margin from the database's (or not measured): read leases suspended, polls read through",
      );
    else if (!first)
      this.logger?.info(fields, "clock within the margin from the database's again: read leases resumed");
  }
}
