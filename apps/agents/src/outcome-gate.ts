import type { Admin, Kafka } from 'kafkajs';
import { errorMessage, Logger } from '@srpo/core';

interface Held {
  /** Partition → offset the materializer must have committed (consumed up to) first. */
  targets: Map<number, number>;
  release: () => Promise<void>;
  heldAtMs: number;
}

/**
 * Holds each task's EpisodeOutcome events until the materializer has consumed
 * every transition of those episodes.
 *
 * Why: the materializer closes an episode as soon as it has the outcome and no
 * transition pending, and it reads the three raw topics independently (within
 * one fetch, episode-outcomes comes before transitions). Under any backlog an
 * outcome sent right after its transitions is processed first, the episode
 * closes after its first set, and the later transitions are dead-lettered as
 * arriving too late. Waiting until the materializer's consumer group has
 * committed past the transitions makes the order certain. (The materializer
 * could instead wait for `EpisodeOutcome.turns` transitions before closing; see
 * docs/demo.md.)
 *
 * Outcomes are released in the order they were held. If the materializer does
 * not catch up within `timeoutMs`, an outcome is sent anyway (logged): losing
 * it would be worse than risking its episode's order.
 */
export class OutcomeGate {
  private readonly queue: Held[] = [];
  private admin?: Admin;
  private timer?: NodeJS.Timeout;
  private polling = false;
  private readonly log: Logger;
  private idleWaiters: (() => void)[] = [];
  /** Outcome batches released after the materializer caught up / after the timeout. */
  readonly released = { inOrder: 0, timedOut: 0 };

  constructor(
    private readonly options: {
      kafka: Kafka;
      /** The materializer's set-materializing consumer group (`<SRPO_APP_ID>.sets`). */
      groupId: string;
      transitionsTopic: string;
      pollMs: number;
      timeoutMs: number;
      logger?: Logger;
    },
  ) {
    this.log = options.logger ?? new Logger('outcome-gate');
  }

  async start(): Promise<void> {
    this.admin = this.options.kafka.admin();
    await this.admin.connect();
    this.timer = setInterval(() => void this.poll(), this.options.pollMs);
  }

  /** Outcome batches waiting. */
  get size(): number {
    return this.queue.length;
  }

  /** The current end offsets of the transitions topic: what to wait for after a batch of transitions was acknowledged. */
  async endOffsets(partitions: readonly number[]): Promise<Map<number, number>> {
    const admin = this.requireAdmin();
    const all = await admin.fetchTopicOffsets(this.options.transitionsTopic);
    const wanted = new Set(partitions);
    return new Map(all.filter((p) => wanted.has(p.partition)).map((p) => [p.partition, Number(p.high)]));
  }

  hold(targets: Map<number, number>, release: () => Promise<void>): void {
    this.queue.push({ targets, release, heldAtMs: Date.now() });
  }

  /** Waits until every held outcome is released (each at the latest at its timeout). */
  async drain(): Promise<void> {
    while (this.queue.length > 0) {
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    }
  }

  async stop(): Promise<void> {
    await this.drain();
    if (this.timer) clearInterval(this.timer);
    await this.admin?.disconnect().catch(() => undefined);
  }

  private requireAdmin(): Admin {
    if (!this.admin) throw new Error('outcome gate not started');
    return this.admin;
  }

  private async poll(): Promise<void> {
    if (this.polling || this.queue.length === 0) return;
    this.polling = true;
    try {
      let committed = new Map<number, number>();
      try {
        const res = await this.requireAdmin().fetchOffsets({ groupId: this.options.groupId, topics: [this.options.transitionsTopic] });
        committed = new Map((res[0]?.partitions ?? []).map((p) => [p.partition, Number(p.offset)]));
      } catch (e) {
        this.log.warn('could not read the materializer offsets', { groupId: this.options.groupId, error: errorMessage(e) });
      }
      while (this.queue.length > 0) {
        const head = this.queue[0];
        const caughtUp = [...head.targets].every(([p, target]) => (committed.get(p) ?? -1) >= target);
        const late = Date.now() - head.heldAtMs > this.options.timeoutMs;
        if (!caughtUp && !late) break;
        if (!caughtUp) {
          this.log.warn('materializer did not consume the transitions in time; sending the outcomes anyway', {
            groupId: this.options.groupId,
            waitedMs: Date.now() - head.heldAtMs,
          });
        }
        try {
          await head.release();
        } catch (e) {
          // Keep it queued: the next poll sends it again (the producer is idempotent per call, the materializer dedupes by content).
          this.log.warn('sending held outcomes failed; retrying', { error: errorMessage(e) });
          break;
        }
        this.queue.shift();
        if (caughtUp) this.released.inOrder++;
        else this.released.timedOut++;
      }
    } finally {
      this.polling = false;
      if (this.queue.length === 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    }
  }
}
