import type { AddressInfo } from 'net';
import { MetricsSink, serveMetrics } from './metrics';

function gauge(text: string, name: string, labels = ''): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  if (!line) throw new Error(`${name}${labels} not in the scrape`);
  return Number(line.split(' ')[1]);
}

describe('MetricsSink', () => {
  it('sanitises names and counts by labels', async () => {
    const m = new MetricsSink();
    m.count('deadletter_total', { reason: 'CLOCK_SKEW' });
    m.count('deadletter_total', { reason: 'CLOCK_SKEW' }, 2);
    m.count('deadletter_total', { reason: 'KEY_MISMATCH' });
    expect(await m.value('deadletter_total', { reason: 'CLOCK_SKEW' })).toBe(3);
    expect(await m.value('deadletter_total', { reason: 'KEY_MISMATCH' })).toBe(1);
    m.set('losses/clip_frac', 0.25);
    expect(await m.registry.metrics()).toContain('srpo_losses_clip_frac 0.25');
  });

  it('rejects, rather than crashing the process, when the port is taken', async () => {
    const first = await serveMetrics(new MetricsSink(), 0);
    try {
      const taken = (first.address() as AddressInfo).port;
      await expect(serveMetrics(new MetricsSink(), taken)).rejects.toMatchObject({ code: 'EADDRINUSE' });
    } finally {
      await new Promise<void>((resolve) => first.close(() => resolve()));
    }
  });

  it('serves process memory and on-demand gauges at each scrape', async () => {
    const m = new MetricsSink();
    let scrapes = 0;
    const server = await serveMetrics(m, 0, undefined, () => m.set('stream/store_entries', ++scrapes, { store: 'episodes' }));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
      const first = await (await fetch(url)).text();
      const second = await (await fetch(url)).text();
      expect(gauge(first, 'srpo_stream_store_entries', '{store="episodes"}')).toBe(1);
      expect(gauge(second, 'srpo_stream_store_entries', '{store="episodes"}')).toBe(2);
      const used = gauge(second, 'srpo_process_heap_used_bytes');
      const total = gauge(second, 'srpo_process_heap_total_bytes');
      expect(used).toBeGreaterThan(0);
      expect(used).toBeLessThanOrEqual(total);
      expect(gauge(second, 'srpo_process_rss_bytes')).toBeGreaterThanOrEqual(total);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
