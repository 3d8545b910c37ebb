import { consumerLag, parseGauge, parseRssAnonMb, parseVmRssMb, ratePerSecond, rssTrend } from './soak-stats';

describe('rssTrend', () => {
  it('fits the slope over warm samples only, in MB per hour', () => {
    // Warm samples (t >= 60): (60,100) (120,101) (180,102) (240,103): 1 MB per 60 s = 60 MB/h.
    // The cold sample at t=0 (40 MB) must not count.
    const t = rssTrend(
      [
        { t: 0, rssMb: 40 },
        { t: 60, rssMb: 100 },
        { t: 120, rssMb: 101 },
        { t: 180, rssMb: 102 },
        { t: 240, rssMb: 103 },
      ],
      60,
      2,
    );
    expect(t).toBeDefined();
    expect(t?.samples).toBe(4);
    expect(t?.slopeMbPerHour).toBeCloseTo(60, 9);
    expect(t?.warmMb).toBeCloseTo(100.5, 9); // mean of 100 and 101
    expect(t?.endMb).toBeCloseTo(102.5, 9); // mean of 102 and 103
    expect(t?.peakMb).toBe(103);
  });

  it('is flat for constant memory and undefined without two warm samples', () => {
    const flat = rssTrend(
      [10, 20, 30].map((t) => ({ t, rssMb: 250 })),
      0,
    );
    expect(flat?.slopeMbPerHour).toBe(0);
    expect(
      rssTrend(
        [
          { t: 5, rssMb: 1 },
          { t: 50, rssMb: 2 },
        ],
        10,
      ),
    ).toBeUndefined();
  });

  it('a sawtooth (GC) around a flat level has a small slope', () => {
    // 200, 220, 200, ... over 10 samples 60 s apart: t̄ = 270, r̄ = 210. Even samples
    // (t−t̄ = −270, −150, −30, 90, 210; sum −150) times −10 give 1500, odd ones (−210, −90, 30,
    // 150, 270; sum 150) times +10 give 1500: Σ(t−t̄)(r−r̄) = 3000; Σ(t−t̄)² = 3600·82.5 = 297000.
    // slope = 3000/297000 MB/s ≈ 36.4 MB/h.
    const s = Array.from({ length: 10 }, (_, i) => ({ t: i * 60, rssMb: i % 2 === 0 ? 200 : 220 }));
    expect(rssTrend(s, 0, 1)?.slopeMbPerHour).toBeCloseTo((3000 / 297000) * 3600, 6);
  });
});

describe('consumerLag', () => {
  it('sums high minus committed, from the log start where nothing is committed', () => {
    const ends = [
      { partition: 0, high: 100, low: 0 },
      { partition: 1, high: 50, low: 10 },
      { partition: 2, high: 7, low: 0 },
    ];
    // p0: 100-90 = 10; p1: nothing committed -> 50-10 = 40; p2: committed past high -> 0.
    expect(
      consumerLag(
        ends,
        new Map([
          [0, 90],
          [2, 9],
        ]),
      ),
    ).toBe(50);
    expect(consumerLag(ends, new Map([[0, -1]]))).toBe(100 + 40 + 7);
  });
});

describe('ratePerSecond and parseVmRssMb', () => {
  it('computes rates and reads /proc status', () => {
    expect(ratePerSecond(1000, 4000, 60)).toBe(50);
    expect(ratePerSecond(5, 5, 0)).toBe(0);
    expect(parseVmRssMb('Name:\tnode\nVmPeak:\t 9 kB\nVmRSS:\t  204800 kB\nThreads: 11\n')).toBe(200);
    expect(parseVmRssMb('Name:\tzombie\n')).toBeUndefined();
    const status = 'VmRSS:\t  3072000 kB\nRssAnon:\t  512000 kB\nRssFile:\t 2560000 kB\n';
    expect(parseRssAnonMb(status)).toBe(500);
    expect(parseRssAnonMb('VmRSS:\t 1 kB\n')).toBeUndefined();
  });
});

describe('parseGauge', () => {
  it('reads one metric by label set and ignores metrics sharing its prefix', () => {
    const text = [
      '# HELP srpo_stream_store_entries stream/store_entries',
      'srpo_stream_store_entries{app="sets",store="episodes",partition="0"} 120',
      'srpo_stream_store_entries{app="sets",store="episodes",partition="1"} 80',
      'srpo_stream_store_entries_total 5',
      'srpo_process_heap_used_bytes 1048576',
    ].join('\n');
    const g = parseGauge(text, 'srpo_stream_store_entries');
    expect([...g.values()]).toEqual([120, 80]);
    expect(g.get('{app="sets",store="episodes",partition="1"}')).toBe(80);
    expect(parseGauge(text, 'srpo_process_heap_used_bytes').get('')).toBe(1048576);
    expect(parseGauge(text, 'srpo_missing').size).toBe(0);
  });
});
