/**
 * Pure arithmetic of the soak report: memory trend once warm, rates from counters,
 * consumer lag from offsets. Kept apart from the runner so it can be unit-tested.
 */

/** One sample of one process. */
export interface RssSample {
  /** Seconds since the soak started. */
  t: number;
  rssMb: number;
}

export interface RssTrend {
  /** Samples the trend is computed over (those at or after the warm-up). */
  samples: number;
  /** Mean RSS over the first and last `window` warm samples. */
  warmMb: number;
  endMb: number;
  /** Least-squares slope over the warm samples, in MB per hour. */
  slopeMbPerHour: number;
  peakMb: number;
}

/**
 * RSS trend after warm-up: `slope = Σ(t−t̄)(r−r̄) / Σ(t−t̄)²`, scaled to MB/hour, plus the mean
 * of the first and last `window` warm samples. Memory that "stays flat once warm" has a slope
 * near zero and `endMb ≈ warmMb`. Undefined when fewer than two warm samples exist.
 */
export function rssTrend(samples: readonly RssSample[], warmupS: number, window = 3): RssTrend | undefined {
  const warm = samples.filter((s) => s.t >= warmupS);
  if (warm.length < 2) return undefined;
  const n = warm.length;
  const tMean = warm.reduce((a, s) => a + s.t, 0) / n;
  const rMean = warm.reduce((a, s) => a + s.rssMb, 0) / n;
  let num = 0;
  let den = 0;
  for (const s of warm) {
    num += (s.t - tMean) * (s.rssMb - rMean);
    den += (s.t - tMean) ** 2;
  }
  const w = Math.max(1, Math.min(window, Math.floor(n / 2)));
  const mean = (xs: readonly RssSample[]) => xs.reduce((a, s) => a + s.rssMb, 0) / xs.length;
  return {
    samples: n,
    warmMb: mean(warm.slice(0, w)),
    endMb: mean(warm.slice(n - w)),
    slopeMbPerHour: den === 0 ? 0 : (num / den) * 3600,
    peakMb: Math.max(...warm.map((s) => s.rssMb)),
  };
}

/** Rate of a monotone counter between two samples, per second (0 for an empty interval). */
export function ratePerSecond(countBefore: number, countAfter: number, seconds: number): number {
  return seconds > 0 ? (countAfter - countBefore) / seconds : 0;
}

export interface PartitionOffsets {
  partition: number;
  /** Log end offset. */
  high: number;
  /** Log start offset. */
  low: number;
}

/**
 * Consumer lag of one group on one topic: per partition, `high − committed`, or `high − low`
 * when the group has committed nothing there yet. On transactionally written topics the last
 * commit marker takes an offset no consumer commits past, so an idle caught-up group shows
 * a lag of up to one per partition.
 */
export function consumerLag(ends: readonly PartitionOffsets[], committed: ReadonlyMap<number, number>): number {
  let lag = 0;
  for (const p of ends) {
    const c = committed.get(p.partition);
    const from = c === undefined || c < 0 ? p.low : c;
    lag += Math.max(0, p.high - from);
  }
  return lag;
}

/**
 * Gauges from a Prometheus text scrape: `name{labels} value` lines of one metric, keyed by
 * their label set (`""` without labels).
 */
export function parseGauge(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    out.set(m[2] ?? '', Number(m[3]));
  }
  return out;
}

/** The RSS of a process from `/proc/<pid>/status` text (`VmRSS:  123456 kB`), in MB. */
export function parseVmRssMb(status: string): number | undefined {
  const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(status);
  return m ? Number(m[1]) / 1024 : undefined;
}

/**
 * Anonymous resident memory (`RssAnon`: heap, malloc, stacks) from /proc/<pid>/status, in MB.
 * RSS also counts file-backed pages, such as the materializer's LMDB memory maps: page cache
 * that grows with the state files and is reclaimable, so a flat-memory goal reads this one.
 */
export function parseRssAnonMb(status: string): number | undefined {
  const m = /^RssAnon:\s+(\d+)\s+kB$/m.exec(status);
  return m ? Number(m[1]) / 1024 : undefined;
}
