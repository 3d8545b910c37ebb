import { Command } from 'commander';
import { isDeepStrictEqual } from 'util';
import { Partitioners } from 'kafkajs';
import {
  AgentEventsProducer,
  createKafka,
  describeTopicSettings,
  ensureTopics,
  EVENT_TYPES,
  EventCodec,
  EventType,
  readTopicsToEnd,
  sampleEvents,
  topicCatalog,
  TopicCatalog,
  toPlain,
} from '@srpo/events';
import { CliConfig } from '../cli-config';

export interface RoundTripReport {
  topicsCreated: string[];
  results: { type: EventType; topic: string; partition: number; offset: number; bytes: number; equal: boolean }[];
}

/**
 * Produces one sample of every event type to its topic (agent events through the
 * SDK, the rest through a plain idempotent producer), reads them back
 * read_committed, decodes them and compares with what was sent.
 */
export async function eventRoundTrip(config: CliConfig, catalog: TopicCatalog = topicCatalog(config.topics)): Promise<RoundTripReport> {
  const kafka = createKafka(config.kafka);
  const codec = new EventCodec(undefined, { maxPayloadBytes: config.maxPayloadBytes });
  const admin = kafka.admin();
  await admin.connect();
  const { created } = await ensureTopics(admin, catalog.all());
  await admin.disconnect();

  const marker = Date.now();
  const samples = sampleEvents(marker % 1000, marker);
  const topicOf: Record<EventType, string> = {
    AgentOutput: catalog.agentOutputs.name,
    Transition: catalog.transitions.name,
    EpisodeOutcome: catalog.episodeOutcomes.name,
    ActiveSet: catalog.activeSets.name,
    AdvantageGroup: catalog.advantageGroups.name,
    PolicyUpdate: catalog.policyUpdates.name,
    PolicyVersion: catalog.policyVersions.name,
    DeadLetter: catalog.deadLetter.name,
    InferredTask: catalog.inferredTasks.name,
    ActionCredit: catalog.actionCredits.name,
    Erasure: catalog.erasures.name,
  };
  const sdk = new AgentEventsProducer({ kafka, codec, topics: catalog });
  await sdk.emitOutput(samples.AgentOutput);
  await sdk.emitTransition(samples.Transition);
  await sdk.emitOutcome(samples.EpisodeOutcome);
  await sdk.disconnect();
  const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  for (const type of ['ActiveSet', 'AdvantageGroup', 'PolicyUpdate', 'PolicyVersion', 'DeadLetter', 'InferredTask', 'ActionCredit', 'Erasure'] as const) {
    await producer.send({ topic: topicOf[type], acks: -1, messages: [{ key: `roundtrip-${marker}`, value: codec.encode(type, samples[type]) }] });
  }
  await producer.disconnect();

  const records = await readTopicsToEnd(kafka, [...new Set(Object.values(topicOf))]);
  const results: RoundTripReport['results'] = [];
  for (const type of EVENT_TYPES) {
    const found = records
      .filter((r) => r.topic === topicOf[type])
      .map((r) => ({ r, d: codec.decode(r.value) }))
      .find(({ d }) => d.type === type && isDeepStrictEqual(toPlain(d.value), toPlain(samples[type])));
    results.push({
      type,
      topic: topicOf[type],
      partition: found?.r.partition ?? -1,
      offset: found?.r.offset ?? -1,
      bytes: found?.r.value?.length ?? 0,
      equal: found !== undefined,
    });
  }
  return { topicsCreated: created, results };
}

export function eventsCommand(config: () => CliConfig): Command {
  const cmd = new Command('events').description('the Avro event contract');
  cmd
    .command('roundtrip')
    .description('produce a sample of every event type through the broker and decode it back')
    .action(async () => {
      const report = await eventRoundTrip(config());
      for (const r of report.results) {
        process.stdout.write(`${r.equal ? 'ok  ' : 'FAIL'} ${r.type.padEnd(15)} ${r.topic}[${r.partition}]@${r.offset} ${r.bytes} B\n`);
      }
      const failed = report.results.filter((r) => !r.equal).length;
      process.stdout.write(
        failed === 0 ? `all ${report.results.length} event types round-tripped through Kafka\n` : `${failed} event type(s) did not round-trip\n`,
      );
      process.exitCode = failed === 0 ? 0 : 1;
    });
  cmd
    .command('topics')
    .description('create the topic catalog (idempotent) and list it')
    .action(async () => {
      const c = config();
      const catalog = topicCatalog(c.topics);
      const admin = createKafka(c.kafka).admin();
      await admin.connect();
      try {
        const { created } = await ensureTopics(admin, catalog.all());
        const settings = await describeTopicSettings(admin, catalog.all());
        for (const t of catalog.all()) {
          const have = settings.find((x) => x.name === t.name);
          process.stdout.write(
            `${created.includes(t.name) ? 'created ' : 'exists  '}${t.name} partitions=${have?.partitions ?? t.partitions} key=${t.key} ` +
              `replication=${have?.replicationFactor ?? '?'} min.insync.replicas=${have?.minInsyncReplicas ?? '?'} retention.ms=${t.config['retention.ms']}\n`,
          );
        }
      } finally {
        await admin.disconnect();
      }
    });
  return cmd;
}
