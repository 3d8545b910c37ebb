/**
 * bench/replay: events/s of `srpo replay --rematerialize`'s re-materialization
 * (bulk read of the raw topics, both materializer processors in-process, the
 * run's active sets, invalid sets and groups written to its own topics) side by
 * side, in one run and on the same range, with a plain read of that range
 * (the same bulk reader, nothing else) and a read + decode.
 *
 *   npm run build:bench && node dist-bench/bench/replay/run.js [--episodes 16000] [--partitions 6] [--repeat 3]
 *
 * Not a test: it prints figures; docs/benchmarks.md records them.
 */
import { randomUUID } from 'crypto';
import * as os from 'os';
import { Kafka } from 'kafkajs';
import { AgentEvent, AgentEventsProducer, bulkReadToOffsets, createKafka, ensureTopics, EventCodec, topicCatalog, TopicCatalog } from '@srpo/events';
import { decodeRecord } from '@srpo/streams';
import { ensureKafka } from '@srpo/testing';
import { rematerialize, RematerializeSettings } from '@srpo/materializer';
import { loadMaterializerConfig } from '../../apps/materializer/src/materializer-config';
import { workload } from '../materializer/workload';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};

async function setup(kafka: Kafka, partitions: number, events: AgentEvent[]): Promise<TopicCatalog> {
  const catalog = topicCatalog({ prefix: `bench.replay.${randomUUID().slice(0, 8)}.`, rawPartitions: partitions, derivedPartitions: 3 });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, catalog.all());
  await admin.disconnect();
  const sdk = new AgentEventsProducer({ kafka, topics: catalog });
  for (let i = 0; i < events.length; i += 1000) await sdk.emitBatch(events.slice(i, i + 1000));
  await sdk.disconnect();
  return catalog;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function main(): Promise<void> {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'bench-replay' });
  const episodes = arg('episodes', 16_000);
  const partitions = arg('partitions', 6);
  const repeat = arg('repeat', 3);
  const events = workload(episodes, 1_700_000_000_000);
  const codec = new EventCodec();
  const m = loadMaterializerConfig({ SRPO_LOG_LEVEL: 'warn' });
  const settings: RematerializeSettings = {
    setTtlMs: m.setTtlMs,
    groupTtlMs: m.groupTtlMs,
    dedupeRetentionMs: m.dedupeRetentionMs,
    maxBrokerSkewMs: m.maxBrokerSkewMs,
    maxLatenessMs: m.maxLatenessMs,
    objective: m.objective,
    limits: m.limits,
  };
  const catalog = await setup(kafka, partitions, events);
  const raw = [catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name];
  console.log(
    `workload: ${episodes} episodes, ${events.length} events (outputs ~${codec.encode('AgentOutput', events[0].value as never).length} B, sets of 1-4, groups of 4), ${partitions} raw partitions`,
  );

  const plain: number[] = [];
  const decoded: number[] = [];
  const full: number[] = [];
  const phases: string[] = [];
  for (let i = 0; i < repeat; i++) {
    let t = Date.now();
    const read = await bulkReadToOffsets(kafka, raw);
    plain.push((read.count * 1000) / (Date.now() - t));

    t = Date.now();
    const again = await bulkReadToOffsets(kafka, raw);
    let n = 0;
    for (const records of again.partitions.values()) for (const r of records) if ('record' in decodeRecord(codec, r)) n++;
    decoded.push((n * 1000) / (Date.now() - t));

    const cpu = process.cpuUsage();
    const result = await rematerialize({ kafka, source: catalog, targetPrefix: `${catalog.prefix}run${i}.`, settings, codec });
    if (result.events !== events.length || result.groups.size !== episodes / 4)
      throw new Error(`re-materialized ${result.events} events into ${result.groups.size} groups`);
    full.push(result.eventsPerSecond);
    const used = process.cpuUsage(cpu);
    // CPU of the whole re-materialization (all threads): steadier than wall time on a shared machine.
    phases.push(
      `read ${result.readMs} ms, process ${result.processMs} ms, write ${result.writeMs} ms; CPU ${((used.user + used.system) / 1000).toFixed(0)} ms`,
    );
    console.log(
      `round ${i + 1}: plain read ${plain[i].toFixed(0)}, read + decode ${decoded[i].toFixed(0)}, re-materialize ${full[i].toFixed(0)} events/s (${phases[i]})`,
    );
  }
  console.log(
    `median of ${repeat} (load average ${os
      .loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')} on ${os.cpus().length} cores):`,
  );
  console.log(`  plain read of the raw range (bulk reader):         ${median(plain).toFixed(0)} events/s`);
  console.log(`  read + decode:                                      ${median(decoded).toFixed(0)} events/s`);
  console.log(
    `  re-materialize (read, both processors, write):      ${median(full).toFixed(0)} events/s  (ratio ${(median(full) / median(plain)).toFixed(2)})`,
  );
}

void main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
