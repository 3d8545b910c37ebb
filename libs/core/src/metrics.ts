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

/** A bare `/metrics` (and `/health`) endpoint for apps without an HTTP framework. */
export function serveMetrics(sink: MetricsSink, port: number, health: () => Promise<boolean> = async () => true): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    void (async () => {
      if (req.url === '/metrics') {
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
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}
