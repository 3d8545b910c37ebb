import * as http from 'http';
import { Counter, Gauge, Registry } from 'prom-client';

/**
 * Counters and gauges created on first use, for components that name metrics
 * freely (`deadletter_total{reason=...}`). Names are sanitised to Prometheus
 * syntax (`losses/clip_frac` -> `srpo_losses_clip_frac`).
 */
export class MetricsSink {
  readonly registry = new Registry();
  private readonly counters = new Map<string, Counter<string>>();
  private readonly gauges = new Map<string, Gauge<string>>();

  constructor(private readonly prefix = 'srpo_') {}

  count(metric: string, labels: Record<string, string> = {}, by = 1): void {
    const name = this.name(metric);
    let c = this.counters.get(name);
    if (!c) {
      c = new Counter({ name, help: metric, labelNames: Object.keys(labels), registers: [this.registry] });
      this.counters.set(name, c);
    }
    c.inc(labels, by);
  }

  set(metric: string, value: number, labels: Record<string, string> = {}): void {
    const name = this.name(metric);
    let g = this.gauges.get(name);
    if (!g) {
      g = new Gauge({ name, help: metric, labelNames: Object.keys(labels), registers: [this.registry] });
      this.gauges.set(name, g);
    }
    g.set(labels, value);
  }

  /**
   * Process memory as gauges (`process/rss_bytes`, `process/heap_used_bytes`,
   * `process/heap_total_bytes`, `process/external_bytes`): set at each scrape, so a soak can
   * tell a growing heap from an allocator that merely keeps pages.
   */
  observeProcessMemory(): void {
    const m = process.memoryUsage();
    this.set('process/rss_bytes', m.rss);
    this.set('process/heap_used_bytes', m.heapUsed);
    this.set('process/heap_total_bytes', m.heapTotal);
    this.set('process/external_bytes', m.external + m.arrayBuffers);
  }

  /** Current value of a counter (for tests and progress lines). */
  async value(metric: string, labels: Record<string, string> = {}): Promise<number> {
    const c = this.counters.get(this.name(metric));
    if (!c) return 0;
    const data = await c.get();
    const match = data.values.find((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val));
    return match?.value ?? 0;
  }

  private name(metric: string): string {
    return this.prefix + metric.replace(/[^a-zA-Z0-9_:]/g, '_').replace(/_+/g, '_');
  }
}

/**
 * A bare `/metrics` (and `/health`) endpoint for apps without an HTTP framework. Each scrape
 * first refreshes the process-memory gauges and runs `beforeScrape` (gauges read on demand,
 * such as store sizes).
 */
export function serveMetrics(
  sink: MetricsSink,
  port: number,
  health: () => Promise<boolean> = async () => true,
  beforeScrape: () => void = () => undefined,
): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    void (async () => {
      if (req.url === '/metrics') {
        sink.observeProcessMemory();
        beforeScrape();
        res.setHeader('Content-Type', sink.registry.contentType);
        res.end(await sink.registry.metrics());
      } else if (req.url === '/health') {
        const ok = await health().catch(() => false);
        res.statusCode = ok ? 200 : 503;
        res.end(JSON.stringify({ status: ok ? 'ok' : 'unavailable' }));
      } else {
        res.statusCode = 404;
        res.end();
      }
    })();
  });
  // A taken port must fail the caller's start with its error, not crash the process later as an unhandled 'error' event.
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}
