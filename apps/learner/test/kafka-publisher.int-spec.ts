import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, sampleEvents, topicCatalog, toPlain } from '@srpo/events';
import { Logger } from '@srpo/core';
import { ensureKafka, uniquePrefix } from '@srpo/testing';
import { KafkaAdminHealth } from '../src/kafka-health';
import { KafkaLearnerEventsPublisher } from '@srpo/trainer';

Logger.configure({ level: 'error' });

describe('KafkaLearnerEventsPublisher on the real broker', () => {
  const brokers = ensureKafka();

  it('writes PolicyUpdate and PolicyVersion keyed by policy id, decodable with the codec', async () => {
    const kafka = createKafka({ brokers, clientId: 'learner-publisher-test' });
    const topics = topicCatalog({ prefix: uniquePrefix('learner-pub') });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [topics.policyUpdates, topics.policyVersions]);
    await admin.disconnect();

    const publisher = new KafkaLearnerEventsPublisher({ kafka, topics });
    const s = sampleEvents(3);
    // A NaN diagnostic is legal in the contract (Avro double) and must survive.
    const update = { ...s.PolicyUpdate, diagnostics: { 'ratio/mean': 1.5, 'ratio/mean_k3': Number.NaN } };
    try {
      await publisher.publish(update, s.PolicyVersion);
    } finally {
      await publisher.disconnect();
    }

    const records = await readTopicsToEnd(kafka, [topics.policyUpdates.name, topics.policyVersions.name]);
    const codec = new EventCodec();
    expect(records.map((r) => [r.topic, r.key?.toString()])).toEqual(
      expect.arrayContaining([
        [topics.policyUpdates.name, 'solver'],
        [topics.policyVersions.name, 'solver'],
      ]),
    );
    expect(records).toHaveLength(2);
    const byTopic = new Map(records.map((r) => [r.topic, r]));
    const decodedUpdate = toPlain(codec.decodeAs('PolicyUpdate', byTopic.get(topics.policyUpdates.name)?.value ?? null));
    expect({ ...decodedUpdate, diagnostics: { ...decodedUpdate.diagnostics, 'ratio/mean_k3': 0 } }).toEqual({
      ...update,
      diagnostics: { ...update.diagnostics, 'ratio/mean_k3': 0 },
    });
    expect(Number.isNaN(decodedUpdate.diagnostics['ratio/mean_k3'])).toBe(true);
    expect(toPlain(codec.decodeAs('PolicyVersion', byTopic.get(topics.policyVersions.name)?.value ?? null))).toEqual(s.PolicyVersion);
  });

  it('refuses an invalid event before sending anything', async () => {
    const kafka = createKafka({ brokers, clientId: 'learner-publisher-test' });
    const topics = topicCatalog({ prefix: uniquePrefix('learner-pub-bad') });
    const publisher = new KafkaLearnerEventsPublisher({ kafka, topics });
    const s = sampleEvents(4);
    const bad = { ...s.PolicyUpdate, versionAfter: 1.5 };
    await expect(publisher.publish(bad, s.PolicyVersion)).rejects.toThrow(/versionAfter/);
    await publisher.disconnect();
  });

  it('KafkaAdminHealth sees the broker and reports an unreachable one quickly', async () => {
    const up = await new KafkaAdminHealth(createKafka({ brokers, clientId: 'learner-health-test', retries: 0 })).probe();
    expect(up.ok).toBe(true);
    expect(up.detail).toMatch(/^1 broker\(s\), controller \d+$/);
    const down = await new KafkaAdminHealth(
      createKafka({ brokers: ['127.0.0.1:1'], clientId: 'learner-health-test', retries: 0, connectionTimeoutMs: 500 }),
      2000,
    ).probe();
    expect(down.ok).toBe(false);
    expect(down.latencyMs).toBeLessThan(2500);
  });
});
