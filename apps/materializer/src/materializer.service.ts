import * as http from 'http';
import { Admin, Kafka } from 'kafkajs';
import { errorMessage, Logger, MetricsSink, serveMetrics } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, topicCatalog, TopicCatalog, topicsWithoutTimestampBound, validateErasure } from '@srpo/events';
import { ConsumerRunner, createStreamClient, GlobalTopicReader } from '@srpo/streams';
import { ErasedContentTable, materializerTopology, type ActiveSetStores, type AdvantageGroupStores } from '@srpo/materializer';
import { MaterializerConfig } from './materializer-config';

/**
 * The newest version of each policy its learner announced on the PolicyVersion
 * topic: a read-only global table (every instance reads the whole topic). Agents
 * learn of versions only from this topic, so once `catchUp` has read it to its
 * current end, an output stamped with a newer version than the table holds cannot
 * come from an honest agent.
 */
export class PublishedPolicyVersions extends GlobalTopicReader {
  private readonly latest: Map<string, number>;

  constructor(kafka: Kafka, topic: string, codec: EventCodec, appId: string) {
    const latest = new Map<string, number>();
    const log = new Logger('policy-versions');
    super(kafka, topic, `${appId}.policy-versions`, (value, at) => {
      try {
        const v = codec.decodeAs('PolicyVersion', value);
        if (v.version > (latest.get(v.policyId) ?? -1)) latest.set(v.policyId, v.version);
      } catch (e) {
        // Not ours to dead-letter (the learner owns the topic); a bad record only cannot raise the bound.
        log.warn('unreadable policy version', { ...at, error: errorMessage(e) });
      }
    });
    this.latest = latest;
  }

  get(policyId: string): number | undefined {
    return this.latest.get(policyId);
  }
}

/**
 * The erasures `srpo erase` announced (docs/erasure.md), read whole by every instance into the
 * table both stages consult. An unreadable or invalid record is logged and skipped: `srpo erase`
 * owns the topic, and the learner still leaves erased content out with the store's keys.
 */
export class PublishedErasures extends GlobalTopicReader {
  readonly table: ErasedContentTable;

  constructor(kafka: Kafka, topic: string, codec: EventCodec, appId: string, metrics: MetricsSink) {
    const table = new ErasedContentTable();
    const log = new Logger('erasures');
    super(kafka, topic, `${appId}.erasures`, (value, at) => {
      try {
        const erasure = codec.decodeAs('Erasure', value);
        validateErasure(erasure);
        const before = table.size;
        table.add(erasure);
        if (table.size > before) metrics.count('materializer_erasures_read_total');
        log.info('erasure read', { ...at, erasureId: erasure.erasureId, keys: erasure.keyIds.length });
      } catch (e) {
        log.warn('unreadable erasure', { ...at, error: errorMessage(e) });
      }
    });
    this.table = table;
  }
}

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
  readonly policyVersions: PublishedPolicyVersions;
  readonly erasures: PublishedErasures;
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
    const versions = new PublishedPolicyVersions(this.kafka, this.catalog.policyVersions.name, codec, config.appId);
    this.policyVersions = versions;
    this.erasures = new PublishedErasures(this.kafka, this.catalog.erasures.name, codec, config.appId, this.metrics);
    const topology = materializerTopology(this.catalog, codec, config, {
      latestPolicyVersion: (policyId) => versions.get(policyId),
      erased: this.erasures.table,
    });
    const client = createStreamClient(config.kafkaClient, config.kafka, this.kafka);
    const state = {
      client,
      stateDir: config.stateDir,
      stateCacheSize: config.stateCacheValues,
      duringLocalWrite: localWriteFault(config.killAtLocalWrite, this.log),
    };
    this.sets = new ConsumerRunner({
      appId: `${config.appId}.sets`,
      kafka: this.kafka,
      codec,
      inputTopics: topology.sets.inputTopics,
      processor: topology.sets.processor,
      deadLetterTopic: this.catalog.deadLetter.name,
      partitions: topology.sets.partitions,
      maxRecordsPerTransaction: config.recordsPerTransaction,
      maxProcessingAttempts: config.maxProcessingAttempts,
      sessionTimeoutMs: config.sessionTimeoutMs,
      ...state,
      count,
      // Only outputs carry a policy version; other topics need no fresh view of the table.
      syncGlobalState: (topic) => (topic === this.catalog.agentOutputs.name ? versions.catchUp() : Promise.resolve()),
    });
    this.groups = new ConsumerRunner({
      appId: `${config.appId}.groups`,
      kafka: this.kafka,
      codec,
      inputTopics: topology.groups.inputTopics,
      processor: topology.groups.processor,
      deadLetterTopic: this.catalog.deadLetter.name,
      partitions: topology.groups.partitions,
      maxRecordsPerTransaction: config.recordsPerTransaction,
      maxProcessingAttempts: config.maxProcessingAttempts,
      sessionTimeoutMs: config.sessionTimeoutMs,
      ...state,
      count,
    });
  }

  /**
   * Raw topics created before the catalog bounded record timestamps accept any timestamp a
   * producer picks, and the set stage bounds event time by it: worth a warning, not a refusal
   * (an operator may alter the topics while the materializer runs). A principal that may not
   * read topic configs only loses the check.
   */
  private async checkTimestampType(admin: Admin): Promise<void> {
    try {
      const unbounded = await topicsWithoutTimestampBound(admin, this.catalog.all());
      if (unbounded.length === 0) return;
      const spec = this.catalog.agentOutputs.config;
      this.log.warn('raw topics accept record timestamps far from the broker clock: event time is bounded by what producers stamp', {
        topics: unbounded,
        fix: `kafka-configs --alter --entity-type topics --entity-name <topic> --add-config message.timestamp.type=${spec['message.timestamp.type']},message.timestamp.after.max.ms=${spec['message.timestamp.after.max.ms']}`,
      });
    } catch (e) {
      this.log.info('could not read the raw topics timestamp type', { error: errorMessage(e) });
    }
  }

  async start(): Promise<void> {
    await this.codec.useRegistry();
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, this.catalog.all());
      await this.checkTimestampType(admin);
    } finally {
      await admin.disconnect();
    }
    // Erasures first, read to their end, so that restored state is swept before new sets go out.
    await this.erasures.start();
    await this.erasures.catchUp().catch((e) => this.log.warn('erasures not read to their end at start; reading on', { error: errorMessage(e) }));
    if (this.config.roles.includes('sets')) {
      await this.policyVersions.start();
      await this.sets.start();
    }
    if (this.config.roles.includes('groups')) await this.groups.start();
    if (this.config.metricsPort > 0) this.server = await serveMetrics(this.metrics, this.config.metricsPort, undefined, () => this.observeStores());
    this.log.info('materializer running', {
      appId: this.config.appId,
      prefix: this.catalog.prefix,
      roles: this.config.roles,
      kafkaClient: this.config.kafkaClient,
    });
  }

  /** `stream/store_entries{app, store, partition}`: how much state each task holds (memory follows it). */
  observeStores(): void {
    for (const [app, runner] of [
      ['sets', this.sets],
      ['groups', this.groups],
    ] as const) {
      for (const t of runner.taskStats()) {
        for (const [store, entries] of Object.entries(t.stores))
          this.metrics.set('stream/store_entries', entries, { app, store, partition: String(t.partition) });
      }
    }
  }

  async stop(): Promise<void> {
    await Promise.all([this.sets.stop(), this.groups.stop()]);
    await this.policyVersions.stop();
    await this.erasures.stop();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.log.info('materializer stopped');
  }
}

/**
 * TEST-ONLY fault injection (SRPO_FAULT_KILL_AT_LOCAL_WRITE): SIGKILL inside the N-th local
 * state write of the process, after its first records are written and before the LMDB
 * transaction commits, so the crash tests see a flush cut short. Never set in production.
 */
function localWriteFault(killAt: number | undefined, log: Logger): (() => void) | undefined {
  if (killAt === undefined) return undefined;
  let writes = 0;
  return () => {
    if (++writes < killAt) return;
    log.warn('SRPO_FAULT_KILL_AT_LOCAL_WRITE reached: killing the process inside a local state write', { write: writes });
    process.kill(process.pid, 'SIGKILL');
  };
}
