import { randomUUID } from 'crypto';
import type { Admin, Consumer, Kafka } from 'kafkajs';
import { errorMessage, Logger } from '@srpo/core';
import { endOffsets, EventCodec, type TopicCatalog } from '@srpo/events';
import { DemoStats } from './demo-stats';

/**
 * Follows the run's topics from the beginning (read_committed, a throwaway
 * consumer group that commits nothing) and folds every event into
 * {@link DemoStats}. The demo learns everything it shows from Kafka, like any
 * other consumer would.
 */
export class DemoMonitor {
  readonly stats = new DemoStats();
  private consumer?: Consumer;
  private readonly positions = new Map<string, number>();
  private readonly log = new Logger('demo-monitor');
  private readonly codec = new EventCodec();
  private decodeErrors = 0;

  constructor(
    private readonly kafka: Kafka,
    private readonly catalog: TopicCatalog,
  ) {}

  private topics(): string[] {
    const c = this.catalog;
    return [c.agentOutputs, c.transitions, c.episodeOutcomes, c.activeSets, c.invalidSets, c.advantageGroups, c.policyUpdates, c.deadLetter].map((t) => t.name);
  }

  async start(): Promise<void> {
    const consumer = this.kafka.consumer({ groupId: `srpo-demo-monitor-${randomUUID()}`, readUncommitted: false, maxWaitTimeInMs: 200 });
    this.consumer = consumer;
    await consumer.connect();
    await consumer.subscribe({ topics: this.topics(), fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        for (const m of batch.messages) this.fold(batch.topic, m.value);
        if (batch.messages.length > 0) this.positions.set(`${batch.topic}:${batch.partition}`, Number(batch.lastOffset()) + 1);
      },
    });
    consumer.on(consumer.events.END_BATCH_PROCESS, (e) => {
      const key = `${e.payload.topic}:${e.payload.partition}`;
      this.positions.set(key, Math.max(this.positions.get(key) ?? 0, Number(e.payload.lastOffset) + 1));
    });
  }

  /** Waits (bounded) until the monitor has read everything the topics hold now: for the final numbers. */
  async catchUp(timeoutMs: number): Promise<boolean> {
    const admin: Admin = this.kafka.admin();
    await admin.connect();
    let targets: Map<string, number>;
    try {
      targets = await endOffsets(admin, this.topics());
    } finally {
      await admin.disconnect();
    }
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const behind = [...targets].filter(([k, end]) => end > 0 && (this.positions.get(k) ?? 0) < end);
      if (behind.length === 0) return true;
      if (Date.now() > deadline) {
        this.log.warn('monitor did not catch up with every topic', { behind: behind.map(([k]) => k) });
        return false;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect().catch((e) => this.log.warn('monitor disconnect failed', { error: errorMessage(e) }));
  }

  private fold(topic: string, value: Buffer | null): void {
    const c = this.catalog;
    const s = this.stats;
    try {
      if (topic === c.episodeOutcomes.name) s.onOutcome(this.codec.decodeAs('EpisodeOutcome', value));
      else if (topic === c.agentOutputs.name) s.onOutput(this.codec.decodeAs('AgentOutput', value));
      else if (topic === c.transitions.name) s.transitions++;
      else if (topic === c.activeSets.name) s.setsComplete++;
      else if (topic === c.invalidSets.name) s.setsInvalid++;
      else if (topic === c.advantageGroups.name) s.onGroup(this.codec.decodeAs('AdvantageGroup', value));
      else if (topic === c.policyUpdates.name) s.onUpdate(this.codec.decodeAs('PolicyUpdate', value));
      else if (topic === c.deadLetter.name) s.onDeadLetter(this.codec.decodeAs('DeadLetter', value).reasonCode);
    } catch (e) {
      // Bad bytes are the materializer's business (it dead-letters them); the monitor only counts them.
      if (this.decodeErrors++ === 0) this.log.warn('monitor could not decode a record', { topic, error: errorMessage(e) });
    }
  }
}
