/**
 * At most `limit` tasks at once; the rest wait in arrival order. The judge's calls share one,
 * so the endpoint sees a bounded number of requests however many partitions are read.
 */
export class ConcurrencyLimit {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`concurrency must be a positive integer, got ${limit}`);
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.active++;
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      // The slot passes to the next waiter directly, so `active` never drops below the queue's need.
      if (next) next();
      else this.active--;
    }
  }

  /** Tasks running now. */
  get running(): number {
    return this.active;
  }
}
