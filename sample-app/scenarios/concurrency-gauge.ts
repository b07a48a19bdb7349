/** Counts the callers inside a section at once, and the most there ever were. */
export class ConcurrencyGauge {
  inside = 0;
  most = 0;

  async around<T>(section: () => Promise<T>): Promise<T> {
    this.most = Math.max(this.most, ++this.inside);
    try {
      return await section();
    } finally {
      this.inside--;
    }
  }
}

export const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
