import { CompressionTypes, Kafka, Partitioners, Producer } from 'kafkajs';
import { ErrorCode, errorMessage, Logger, SrpoError } from '@srpo/core';
import { EventCodec, topicCatalog, type PolicyUpdate, type PolicyVersion, type TopicCatalog } from '@srpo/events';
import type { LearnerEventsPublisher } from './events-publisher';

export interface KafkaLearnerEventsPublisherOptions {
  kafka: Kafka;
  topics?: TopicCatalog;
  codec?: EventCodec;
}

/**
 * Publishes PolicyUpdate and PolicyVersion, keyed by policy id, in one request
 * with an idempotent producer (acks=all), so producer retries never duplicate
 * a record. Both events are validated and encoded before anything is sent.
 */
export class KafkaLearnerEventsPublisher implements LearnerEventsPublisher {
  private readonly producer: Producer;
  private readonly codec: EventCodec;
  private readonly topics: TopicCatalog;
  private readonly log = new Logger('learner-publisher');
  private connecting?: Promise<void>;

  constructor(options: KafkaLearnerEventsPublisherOptions) {
    this.codec = options.codec ?? new EventCodec();
    this.topics = options.topics ?? topicCatalog();
    this.producer = options.kafka.producer({ idempotent: true, maxInFlightRequests: 5, createPartitioner: Partitioners.DefaultPartitioner });
  }

  async connect(): Promise<void> {
    this.connecting ??= this.producer.connect().catch((e: unknown) => {
      this.connecting = undefined;
      throw e;
    });
    await this.connecting;
  }

  async disconnect(): Promise<void> {
    if (!this.connecting) return;
    this.connecting = undefined;
    await this.producer.disconnect();
  }

  async publish(update: PolicyUpdate, version: PolicyVersion): Promise<void> {
    const updateBytes = this.codec.encode('PolicyUpdate', update);
    const versionBytes = this.codec.encode('PolicyVersion', version);
    try {
      await this.connect();
      await this.producer.sendBatch({
        acks: -1,
        compression: CompressionTypes.None,
        topicMessages: [
          { topic: this.topics.policyUpdates.name, messages: [{ key: update.policyId, value: updateBytes }] },
          { topic: this.topics.policyVersions.name, messages: [{ key: version.policyId, value: versionBytes }] },
        ],
      });
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `publishing update ${update.updateId} failed: ${errorMessage(e)}`, { retriable: true, cause: e });
    }
    this.log.info('update published', { updateId: update.updateId, policyId: update.policyId, version: version.version });
  }
}
