import { errorMessage, Logger, retry } from '@srpo/core';
import type { GroupConsumer, InputBatch, StreamClient } from './client/stream-client';
import type { CountMetric } from './loop-mode';

/** The group membership both modes configure alike. */
export interface LoopConsumerSettings {
  groupId: string;
  topics: string[];
  sessionTimeoutMs: number;
  /** Metric prefix of the consumer restart counter (`stream` or `sink`, names kept from before the modes met). */
  metricPrefix: 'stream' | 'sink';
}

/** What the loop does with what the consumer hands over. */
export interface LoopConsumerHandlers {
  onAssignment(partitions: ReadonlySet<number>): void;
  onBatch(batch: InputBatch): Promise<void>;
  /** Between the crashed consumer's stop and its replacement's start. */
  beforeRestart(): Promise<void>;
  /** True once the runner is stopping: no restart then. */
  stopping(): boolean;
}

/**
 * The consumer of {@link ConsumerRunner}'s loop: its group membership, its replacement
 * after a fatal client error (the client does not restart by itself), and pause/resume,
 * which survive a replacement. Seeks and commits go to whichever consumer is current.
 */
export class LoopConsumer {
  private consumer?: GroupConsumer;
  private paused = false;
  private restarting = false;

  constructor(
    private readonly client: StreamClient,
    private readonly settings: LoopConsumerSettings,
    private readonly handlers: LoopConsumerHandlers,
    private readonly log: Logger,
    private readonly count: CountMetric,
  ) {}

  async start(): Promise<void> {
    const { sessionTimeoutMs } = this.settings;
    const consumer = this.client.groupConsumer({
      groupId: this.settings.groupId,
      topics: this.settings.topics,
      sessionTimeoutMs,
      rebalanceTimeoutMs: 60_000,
      heartbeatIntervalMs: Math.min(3_000, Math.floor(sessionTimeoutMs / 3)),
      maxWaitMs: 250,
    });
    this.consumer = consumer;
    if (this.paused) consumer.pause();
    await consumer.start({
      onAssignment: (partitions) => this.handlers.onAssignment(partitions),
      onFatal: (error) => {
        if (!this.handlers.stopping()) void this.restart(errorMessage(error));
      },
      onBatch: (batch) => this.handlers.onBatch(batch),
    });
  }

  /**
   * Replaces a crashed consumer; tasks are rebuilt from their changelogs on the next batch,
   * and the sink mode's unwritten items are read again from the committed offsets.
   */
  private async restart(reason: string): Promise<void> {
    if (this.restarting) return;
    this.restarting = true;
    this.log.warn('consumer crashed; recreating it', { reason });
    this.count(`${this.settings.metricPrefix}_consumer_restarts_total`);
    try {
      const old = this.consumer;
      this.consumer = undefined;
      await old?.stop().catch(() => undefined);
      await this.handlers.beforeRestart();
      await retry(() => this.start(), {
        initialDelayMs: 500,
        linearStepMs: 500,
        maxDelayMs: 10_000,
        retryIf: () => true,
        stopped: () => this.handlers.stopping(),
        onRetry: (e, attempt) => this.log.warn('consumer restart failed; retrying', { attempt, error: errorMessage(e) }),
      }).catch(() => undefined);
    } finally {
      this.restarting = false;
    }
  }

  async stop(): Promise<void> {
    await this.consumer?.stop().catch((e) => this.log.warn('consumer disconnect failed', { error: errorMessage(e) }));
  }

  /** Rewinds one partition of the current consumer (none while it is being replaced). */
  seek(topic: string, partition: number, offset: number): void {
    this.consumer?.seek(topic, partition, offset);
  }

  /** Commits one partition's offset outside any transaction (sink mode). */
  async commit(topic: string, partition: number, offset: number): Promise<void> {
    await this.consumer?.commit(topic, partition, offset);
  }

  pause(): void {
    this.paused = true;
    this.consumer?.pause();
  }

  resume(): void {
    this.paused = false;
    this.consumer?.resume();
  }

  get isPaused(): boolean {
    return this.paused;
  }
}
