// How many uploads one gateway instance has in flight (docs/files.md, "Bounds on uploads"), per
// partner and in total; a slot is taken before any byte is read.
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
}
