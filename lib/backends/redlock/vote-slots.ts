/**
 * At most `limit` votes out at once; the others wait here, in arrival order. A burst of votes
 * on distinct names would otherwise put thousands of requests on the wire at once, and the
 * replies queued behind each other in this process would run votes out of their request timeout.
 */
export class VoteSlots {
  private out = 0;
  private readonly queued: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  /** Resolves (at once when a slot is free) with the function that gives the slot back. */
  take(): Promise<() => void> | (() => void) {
    if (this.out < this.limit) {
      this.out++;
      return this.giveBack;
    }
    return new Promise((resolve) => this.queued.push(() => resolve(this.giveBack)));
  }

  private readonly giveBack = (): void => {
    const next = this.queued.shift();
    if (next) next();
    else this.out--;
  };
}
