import type { Kafka } from 'kafkajs';
import { errorMessage } from '@srpo/core';

export interface ProbeResult {
  ok: boolean;
  /** Why not, or what was seen (broker count). */
  detail: string;
  latencyMs: number;
}

/** Can the learner reach its Kafka cluster? Used by `GET /health`. */
export interface KafkaHealth {
  probe(): Promise<ProbeResult>;
}

/**
 * Probes with a short-lived admin client: connect, describe the cluster,
 * disconnect, within `timeoutMs`. The Kafka client it is given should have
 * few retries so an unreachable cluster is reported quickly.
 */
export class KafkaAdminHealth implements KafkaHealth {
  constructor(
    private readonly kafka: Kafka,
    private readonly timeoutMs = 3000,
  ) {}

  async probe(): Promise<ProbeResult> {
    const started = Date.now();
    const admin = this.kafka.admin();
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
      });
      const cluster = await Promise.race([
        (async () => {
          await admin.connect();
          return admin.describeCluster();
        })(),
        timeout,
      ]);
      return { ok: true, detail: `${cluster.brokers.length} broker(s), controller ${cluster.controller ?? 'unknown'}`, latencyMs: Date.now() - started };
    } catch (e) {
      return { ok: false, detail: errorMessage(e), latencyMs: Date.now() - started };
    } finally {
      if (timer) clearTimeout(timer);
      await admin.disconnect().catch(() => undefined);
    }
  }
}
