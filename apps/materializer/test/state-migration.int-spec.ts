import { Kafka } from 'kafkajs';
import { ActiveSet, AdvantageGroup, AgentEventsProducer, createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { changelogTopic, ProcessorHarness } from '@srpo/streams';
import { ensureKafka, outcome, output, streamClientEnv, transition, uniquePrefix } from '@srpo/testing';
import { ActiveSetProcessor, ActiveSetStores } from '@srpo/materializer';
import { loadMaterializerConfig } from '../src/materializer-config';
import { Materializer } from '../src/materializer.service';

const codec = new EventCodec();

/**
 * An upgrade with state in flight: the changelogs and committed offsets a materializer of the
 * previous state layout left behind (waiting outputs, pending transitions, claims as bare ids,
 * an open group's sets, each in a store of its own) are written by hand, then the current
 * materializer starts on them. Nothing in flight may be lost: the waiting set completes with
 * the bytes of the output read before the upgrade, and the open group fills with the set
 * grouped before it.
 */
describe('materializer state of the previous layout', () => {
  const brokers = ensureKafka();
  let kafka: Kafka;
  let materializer: Materializer | undefined;

  beforeAll(() => {
    kafka = createKafka({ brokers, clientId: 'state-migration-test' });
  });

  afterAll(async () => {
    await materializer?.stop();
  });

  it('restores and migrates it, and completes the set and the group that were in flight', async () => {
    const config = loadMaterializerConfig({
      ...streamClientEnv(),
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: uniquePrefix('migrate'),
      SRPO_RAW_PARTITIONS: '1',
      SRPO_DERIVED_PARTITIONS: '1',
      SRPO_LOG_LEVEL: 'warn',
    });
    const catalog = topicCatalog(config.topics);
    const admin = kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, catalog.all());
      const sets = `${config.appId}.sets`;
      const groups = `${config.appId}.groups`;
      const stores = [
        [sets, ['outputs', 'transitions', 'episodes', 'claims', 'owners', 'clock', '__meta']],
        [groups, ['groups', 'sets', 'emitted', 'clock', '__meta']],
      ] as const;
      await admin.createTopics({
        topics: stores.flatMap(([app, names]) =>
          names.map((n) => ({ topic: changelogTopic(app, n), numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] })),
        ),
      });

      // Before the upgrade: u1/o0 and transition u1/t0 (listing u1/o0 and u1/o1) were read; u1/o1
      // and the outcome were not. Set x1/t0 of the same declared group of 2 was already grouped.
      const declared = { groupKey: 'g', expectedGroupSize: 2 };
      const sdk = new AgentEventsProducer({ kafka, topics: catalog });
      const o0 = output('u1', 0);
      const t0 = transition('u1', [0, 1], { ...declared, eventTimeMs: 1001 });
      await sdk.emitOutput(o0);
      await sdk.emitTransition(t0);
      const earlier = new ProcessorHarness<ActiveSetStores>(new ActiveSetProcessor({ topics: catalog, codec }));
      earlier.feedAll([
        earlier.record(catalog.agentOutputs.name, { type: 'AgentOutput', value: output('x1', 0, { eventTimeMs: 900, startedAtMs: 900 }) }, 'x1', codec),
        earlier.record(
          catalog.transitions.name,
          { type: 'Transition', value: transition('x1', [0], { ...declared, reward: 0, eventTimeMs: 901 }) },
          'x1',
          codec,
        ),
      ]);
      expect(earlier.deadLetters.map((d) => d.reason)).toEqual([]);
      const x1 = earlier.outputs[0].value as ActiveSet;
      const producer = kafka.producer();
      await producer.connect();
      await producer.send({ topic: catalog.activeSets.name, messages: [{ key: x1.groupKey, value: codec.encode('ActiveSet', x1) }] });
      const json = (v: unknown) => Buffer.from(JSON.stringify(v));
      const coordinates = (topic: string) => ({ topic, partition: 0, offset: 0 });
      await producer.sendBatch({
        topicMessages: [
          {
            topic: changelogTopic(sets, 'episodes'),
            messages: [
              {
                key: 'u1',
                value: json({
                  episodeId: 'u1',
                  pending: ['u1/t0'],
                  outputIds: ['u1/o0'],
                  transitionIds: ['u1/t0'],
                  digests: ['obs-a'],
                  outcome: null,
                  outcomeSource: null,
                  outcomeDigest: null,
                  claimedOutputIds: ['u1/o0', 'u1/o1'],
                  orphanOutcomeRaw: null,
                  orphanKey: null,
                  expiresAtMs: null,
                  closed: false,
                  doneSeen: true,
                  lastEventMs: 1001,
                }),
              },
            ],
          },
          {
            topic: changelogTopic(sets, 'outputs'),
            messages: [
              {
                key: 'u1/o0',
                value: json({
                  outputId: 'u1/o0',
                  source: coordinates(catalog.agentOutputs.name),
                  digest: 'd',
                  episodeId: 'u1',
                  agentId: o0.agentId,
                  role: o0.role,
                  policyId: o0.policyId,
                  policyVersion: 1,
                  temperature: 1,
                  eventTimeMs: 1000,
                }),
              },
            ],
          },
          {
            topic: changelogTopic(sets, 'transitions'),
            messages: [{ key: 'u1/t0', value: json({ transition: t0, source: coordinates(catalog.transitions.name), digest: 'd', deadlineMs: 61_001 }) }],
          },
          {
            topic: changelogTopic(sets, 'claims'),
            messages: [
              { key: 'u1/o0', value: json('u1/t0') },
              { key: 'u1/o1', value: json('u1/t0') },
            ],
          },
          { topic: changelogTopic(sets, 'owners'), messages: [{ key: 'u1/o0', value: json('u1') }] },
          {
            topic: changelogTopic(groups, 'groups'),
            messages: [
              { key: x1.groupKey, value: json({ groupKey: x1.groupKey, policyId: 'worker', expectedSize: 2, setIds: ['x1/t0'], deadlineMs: 120_901 }) },
            ],
          },
          { topic: changelogTopic(groups, 'sets'), messages: [{ key: 'x1/t0', value: json({ source: coordinates(catalog.activeSets.name) }) }] },
        ],
      });
      await producer.disconnect();
      for (const [groupId, topic] of [
        [sets, catalog.agentOutputs.name],
        [sets, catalog.transitions.name],
        [groups, catalog.activeSets.name],
      ]) {
        await admin.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: '1' }] });
      }

      materializer = new Materializer(config);
      await materializer.start();
      await sdk.emitOutput(output('u1', 1, { eventTimeMs: 1002, startedAtMs: 1002 }));
      await sdk.emitOutcome(outcome('u1', 1, { eventTimeMs: 1003 }));
      await sdk.disconnect();

      const deadline = Date.now() + 60_000;
      let found: AdvantageGroup[] = [];
      while (found.length === 0 && Date.now() < deadline) {
        found = (await readTopicsToEnd(kafka, [catalog.advantageGroups.name])).map((r) => codec.decodeAs('AdvantageGroup', r.value as Buffer));
        if (found.length === 0) await new Promise((r) => setTimeout(r, 500));
      }
      expect(found).toHaveLength(1);
      const [group] = found;
      expect(group.sets.map((s) => [s.set.setId, s.setSource.offset])).toEqual([
        ['u1/t0', 1],
        ['x1/t0', 0],
      ]);
      // Rewards 1 (outcome) and 0 (immediate): sample std 0.70711, A = ±0.5 / (0.70711 + 1e-6).
      const a = 0.5 / (Math.SQRT1_2 + 1e-6);
      expect(group.sets[0].advantage).toBeCloseTo(a, 9);
      expect(group.sets[1].advantage).toBeCloseTo(-a, 9);
      // The member read before the upgrade carries the bytes of its original record.
      const [u1] = group.sets;
      expect(u1.set.members.map((m) => m.outputId)).toEqual(['u1/o0', 'u1/o1']);
      expect(u1.set.members[0].output.equals(codec.encode('AgentOutput', o0))).toBe(true);
      expect(u1.set.members[0].source).toEqual(coordinates(catalog.agentOutputs.name));

      // The previous layout's stores were drained (tombstones) and the episode rewritten.
      const changelog = await readTopicsToEnd(kafka, [
        changelogTopic(sets, 'outputs'),
        changelogTopic(sets, 'transitions'),
        changelogTopic(sets, 'episodes'),
        changelogTopic(groups, 'sets'),
      ]);
      const last = (topic: string, key: string) => changelog.filter((r) => r.topic === topic && r.key?.toString() === key).pop();
      expect(last(changelogTopic(sets, 'outputs'), 'u1/o0')?.value).toBeNull();
      expect(last(changelogTopic(sets, 'transitions'), 'u1/t0')?.value).toBeNull();
      expect(last(changelogTopic(groups, 'sets'), 'x1/t0')?.value).toBeNull();
      const episode = JSON.parse((last(changelogTopic(sets, 'episodes'), 'u1')?.value as Buffer).toString('utf8')) as Record<string, unknown>;
      expect(episode.claims).toEqual({ 'u1/o0': 'u1/t0', 'u1/o1': 'u1/t0' });
      expect(episode.claimedOutputIds).toBeUndefined();
      expect(episode.closed).toBe(true);
    } finally {
      await admin.disconnect();
    }
  });
});
