import { Kafka } from 'kafkajs';
import { errorMessage, Logger, retry } from '@srpo/core';
import { EventCodec, TopicCatalog } from '@srpo/events';
import { ConsumerRunner } from '@srpo/streams';
import { BatchHandler, ConsumptionControl, ConsumptionState, GroupSource, ReadyGroup } from './group-source';

/**
 * Ready groups of one policy from the advantage-groups topic, in log order
 * (the topic is keyed by policy id, so one partition holds a policy's groups
 * in order and mini-batches are the same on every replay). A mini-batch is the
 * shortest run of consecutive groups holding at least `setsPerUpdate` sets.
 * Offsets are committed after the update cycle handled the batch: the streams
 * runtime's one consumer loop in its sink mode ({@link ConsumerRunner.sink}).
 */
export class KafkaGroupSource implements GroupSource, ConsumptionControl {
  private runner?: ConsumerRunner;
  private current: ConsumptionState = { paused: false, changedAtMs: null };
  private stopped = false;
  private starting?: Promise<void>;
  private readonly log: Logger;

  constructor(
    private readonly options: {
      kafka: Kafka;
      codec: EventCodec;
      catalog: TopicCatalog;
      groupId: string;
      policyId: string;
      setsPerUpdate: number;
      sessionTimeoutMs?: number;
      clock?: () => number;
      count?: (metric: string, labels?: Record<string, string>) => void;
    },
  ) {
    this.log = new Logger('group-source', { policyId: options.policyId, groupId: options.groupId });
  }

  /**
   * Resolves at once: the consumer connects in the background and keeps retrying
   * while the cluster is unreachable, so the HTTP API (and /health, which reports
   * the outage) is up regardless.
   */
  async start(onBatch: BatchHandler): Promise<void> {
    this.starting = this.connectLoop(onBatch);
  }

  /**
   * Connects, retrying any failure (the cluster being away is not the only reason a start
   * fails, and the learner must come up by itself once it is back) every 1 s, 2 s, ... up to
   * 30 s, until it succeeds or {@link stop} is called.
   */
  private async connectLoop(onBatch: BatchHandler): Promise<void> {
    try {
      await retry(
        async () => {
          try {
            await this.connect(onBatch);
          } catch (e) {
            await this.runner?.stop().catch(() => undefined);
            this.runner = undefined;
            throw e;
          }
        },
        {
          initialDelayMs: 1000,
          linearStepMs: 1000,
          maxDelayMs: 30_000,
          retryIf: () => true,
          stopped: () => this.stopped,
          onRetry: (e, attempt) => this.log.warn('consumer could not start; retrying', { attempt, error: errorMessage(e) }),
        },
      );
    } catch (e) {
      // Only reached once stopped (everything else is retried): a shutdown, not a failure to report.
      if (!this.stopped) throw e;
    }
  }

  private async connect(onBatch: BatchHandler): Promise<void> {
    const { kafka, codec, catalog, groupId, policyId, setsPerUpdate } = this.options;
    this.runner = ConsumerRunner.sink<ReadyGroup>({
      kafka,
      codec,
      groupId,
      topic: catalog.advantageGroups.name,
      deadLetterTopic: catalog.deadLetter.name,
      processorName: 'learner',
      logger: this.log,
      sessionTimeoutMs: this.options.sessionTimeoutMs,
      count: this.options.count,
      select: (record) => {
        if (record.event.type !== 'AdvantageGroup' || record.event.value.policyId !== policyId) return null;
        return { group: record.event.value, source: record.source };
      },
      batchSize: (pending) => {
        let sets = 0;
        for (let i = 0; i < pending.length; i++) {
          sets += pending[i].group.sets.length;
          if (sets >= setsPerUpdate) return i + 1;
        }
        return 0;
      },
      write: onBatch,
    });
    await this.runner.start();
    if (this.current.paused) this.runner.pause();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.runner?.stop();
    await this.starting;
  }

  async pause(): Promise<ConsumptionState> {
    if (!this.current.paused) {
      this.runner?.pause();
      this.current = { paused: true, changedAtMs: (this.options.clock ?? Date.now)() };
    }
    return this.state();
  }

  async resume(): Promise<ConsumptionState> {
    if (this.current.paused) {
      this.runner?.resume();
      this.current = { paused: false, changedAtMs: (this.options.clock ?? Date.now)() };
    }
    return this.state();
  }

  state(): ConsumptionState {
    return { ...this.current };
  }
}
