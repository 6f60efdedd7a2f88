// The bounds on uploads in flight at one gateway instance (docs/files.md, "Bounds on uploads"):
// how many at once, and how slowly their bytes may arrive.

/** Counts uploads in flight per partner and in total; a slot is taken before any byte is read. */
export class UploadSlots {
  private readonly perPartner = new Map<string, number>();
  private total = 0;

  constructor(
    private readonly maxPerPartner: number,
    private readonly maxTotal: number,
  ) {}

  /** The release of a slot, or undefined when the partner or the instance is at its cap. */
  tryTake(partnerId: string): (() => void) | undefined {
    const mine = this.perPartner.get(partnerId) ?? 0;
    if (mine >= this.maxPerPartner || this.total >= this.maxTotal) return undefined;
    this.perPartner.set(partnerId, mine + 1);
    this.total += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total -= 1;
      const left = (this.perPartner.get(partnerId) ?? 1) - 1;
      if (left === 0) this.perPartner.delete(partnerId);
      else this.perPartner.set(partnerId, left);
    };
  }

  inFlight(partnerId?: string): number {
    return partnerId === undefined ? this.total : (this.perPartner.get(partnerId) ?? 0);
  }
}

/** A minimum transfer rate, judged window by window on a running byte count. */
export class TransferRate {
  private lastCount: number;

  constructor(
    private readonly minBytesPerSecond: number,
    private readonly windowMs: number,
    startCount: number,
  ) {
    this.lastCount = startCount;
  }

  /** Called once per window with the running byte count: false when the window fell short. */
  windowEnded(count: number): boolean {
    const arrived = count - this.lastCount;
    this.lastCount = count;
    return arrived >= (this.minBytesPerSecond * this.windowMs) / 1000;
  }
}
