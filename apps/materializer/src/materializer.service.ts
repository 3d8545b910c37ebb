import * as http from 'http';
import { Kafka } from 'kafkajs';
import { Logger, MetricsSink, serveMetrics } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, topicCatalog, TopicCatalog } from '@srpo/events';
import { ConsumerRunner } from '@srpo/streams';
import { ActiveSetProcessor, ActiveSetStores } from './active-set.processor';
import { AdvantageGroupProcessor, AdvantageGroupStores } from './advantage-group.processor';
import { MaterializerConfig } from './materializer-config';

/**
 * Wires the two sub-topologies: raw events -> active sets (repartitioned by group
 * key through the active-sets topic) -> advantage groups. Each runs its own
 * consumer group and exactly-once runner.
 */
export class Materializer {
  readonly metrics = new MetricsSink();
  readonly catalog: TopicCatalog;
  readonly sets: ConsumerRunner<ActiveSetStores>;
  readonly groups: ConsumerRunner<AdvantageGroupStores>;
  private readonly kafka: Kafka;
  private readonly codec: EventCodec;
  private server?: http.Server;
  private readonly log = new Logger('materializer');

  constructor(private readonly config: MaterializerConfig) {
    this.kafka = createKafka(config.kafka);
    this.catalog = topicCatalog(config.topics);
    const codec = new EventCodec(undefined, { maxPayloadBytes: config.maxPayloadBytes, registry: config.schemaRegistry });
    this.codec = codec;
    const count = (metric: string, labels?: Record<string, string>) => this.metrics.count(metric, labels);
    this.sets = new ConsumerRunner({
      appId: `${config.appId}.sets`,
      kafka: this.kafka,
      codec,
      inputTopics: [this.catalog.agentOutputs.name, this.catalog.transitions.name, this.catalog.episodeOutcomes.name],
      processor: new ActiveSetProcessor({
        topics: this.catalog,
        codec,
        setTtlMs: config.setTtlMs,
        dedupeRetentionMs: config.dedupeRetentionMs,
        maxFutureSkewMs: config.maxFutureSkewMs,
        maxLatenessMs: config.maxLatenessMs,
        limits: config.limits,
      }),
      deadLetterTopic: this.catalog.deadLetter.name,
      partitions: this.catalog.agentOutputs.partitions,
      maxRecordsPerTransaction: config.recordsPerTransaction,
      sessionTimeoutMs: config.sessionTimeoutMs,
      count,
    });
    this.groups = new ConsumerRunner({
      appId: `${config.appId}.groups`,
      kafka: this.kafka,
      codec,
      inputTopics: [this.catalog.activeSets.name],
      processor: new AdvantageGroupProcessor({ topics: this.catalog, codec, objective: config.objective, groupTtlMs: config.groupTtlMs, dedupeRetentionMs: config.dedupeRetentionMs }),
      deadLetterTopic: this.catalog.deadLetter.name,
      partitions: this.catalog.activeSets.partitions,
      maxRecordsPerTransaction: config.recordsPerTransaction,
      sessionTimeoutMs: config.sessionTimeoutMs,
      count,
    });
  }

  async start(): Promise<void> {
    await this.codec.useRegistry();
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, this.catalog.all());
    } finally {
      await admin.disconnect();
    }
    if (this.config.roles.includes('sets')) await this.sets.start();
    if (this.config.roles.includes('groups')) await this.groups.start();
    if (this.config.metricsPort > 0) this.server = await serveMetrics(this.metrics, this.config.metricsPort);
    this.log.info('materializer running', { appId: this.config.appId, prefix: this.catalog.prefix, roles: this.config.roles });
  }

  async stop(): Promise<void> {
    await Promise.all([this.sets.stop(), this.groups.stop()]);
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.log.info('materializer stopped');
  }
}
