/**
 * bench/materializer: events/s through the materializer on the local broker,
 * side by side with a pass-through (consume and transactionally re-produce the same
 * bytes, offsets in the transaction) on the same Kafka client, over the same input,
 * in one run; then process RSS of the materializer with 25k/50k/100k open episodes.
 * Materializer figures are end to end: from start until every advantage group
 * is committed (two exactly-once hops: raw -> active sets -> groups).
 *
 *   npm run build && npm run build:bench && node dist-bench/bench/materializer/run.js [--episodes 12000] [--open 100000]
 *     [--client kafkajs|platformatic]   pass-through relays and materializer on the runtime's client interface
 *
 * Not a test: it prints figures; docs/benchmarks.md records them.
 */
import { ChildProcess } from 'child_process';
import { randomUUID } from 'crypto';
import { Session } from 'inspector';
import { Kafka } from 'kafkajs';
import { AgentEvent, AgentEventsProducer, createKafka, ensureTopics, EventCodec, topicCatalog, TopicCatalog } from '@srpo/events';
import { createStreamClient, type StreamClient, type TransactionalProducer } from '@srpo/streams';
import { ensureKafka, sleep, spawnApp } from '@srpo/testing';
import * as fs from 'fs';
import { loadMaterializerConfig } from '../../apps/materializer/src/materializer-config';
import { Materializer } from '../../apps/materializer/src/materializer.service';
import { bigOutput, workload } from './workload';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};

async function setupTopics(kafka: Kafka, prefix: string): Promise<TopicCatalog> {
  const catalog = topicCatalog({ prefix, rawPartitions: 2, derivedPartitions: 2 });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, catalog.all());
  await admin.disconnect();
  return catalog;
}

async function produceAll(kafka: Kafka, catalog: TopicCatalog, events: AgentEvent[]): Promise<number> {
  const sdk = new AgentEventsProducer({ kafka, topics: catalog });
  let bytes = 0;
  const codec = new EventCodec();
  for (let i = 0; i < events.length; i += 1000) await sdk.emitBatch(events.slice(i, i + 1000));
  for (const e of events.slice(0, 100)) bytes += codec.encode(e.type, e.value as never).length;
  await sdk.disconnect();
  return bytes / 100;
}

async function waitForCounter(read: () => Promise<number>, target: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if ((await read()) >= target) return;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${target}`);
}

/** Events/s and this process's CPU seconds (user + system, all threads) over the timed window. */
interface RunResult {
  eventsPerSecond: number;
  cpuSeconds: number;
  /** Offsets the run wrote (records and transaction markers), where counted. */
  written?: { changelogs: number; outputs: number };
}

function cpuSince(start: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1e6;
}

/** Materializer settings passed through from the command line (`--records-per-transaction N`). */
function tuning(): Record<string, string> {
  const n = argValue('records-per-transaction');
  return { ...(n ? { SRPO_RECORDS_PER_TRANSACTION: n } : {}), SRPO_STATE_STORE: stateStore, SRPO_KAFKA_CLIENT: argValue('client') ?? 'kafkajs' };
}

/** The state store of the materializer runs (`--state lmdb|memory|both`; both: each, side by side). */
let stateStore = argValue('state') === 'memory' ? 'memory' : 'lmdb';

function argValue(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** A V8 CPU profile of the timed window only (`--profile FILE`), for where a run's time went. */
async function startProfiler(): Promise<{ stopTo(file: string): Promise<void> }> {
  const session = new Session();
  session.connect();
  const post = <T>(method: string): Promise<T> => new Promise((resolve, reject) => session.post(method, (e, r) => (e ? reject(e) : resolve(r as T))));
  await post('Profiler.enable');
  await post('Profiler.start');
  return {
    async stopTo(file: string) {
      const { profile } = await post<{ profile: unknown }>('Profiler.stop');
      fs.writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
}

/** Materializer throughput: from start until every input record is committed. */
async function materializerRun(kafka: Kafka, brokers: string[], events: AgentEvent[]): Promise<RunResult> {
  const prefix = `bench.mat.${randomUUID().slice(0, 8)}.`;
  const catalog = await setupTopics(kafka, prefix);
  const config = loadMaterializerConfig({
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: '2',
    SRPO_DERIVED_PARTITIONS: '2',
    SRPO_LOG_LEVEL: 'warn',
    ...tuning(),
  });
  // Warm-up on empty topics: creates the changelog topics, a one-time cost of a new application.
  const warm = new Materializer(config);
  await warm.start();
  await warm.stop();
  await produceAll(kafka, catalog, events);
  const m = new Materializer(config);
  const profile = argValue('profile');
  const profiler = profile ? await startProfiler() : undefined;
  const start = Date.now();
  const cpu = process.cpuUsage();
  await m.start();
  const groups = events.filter((e) => e.type === 'Transition').length / 4;
  await waitForCounter(() => m.metrics.value('advantage-group-materializer_groups_ready_total', { reason: 'SIZE' }), groups, 600_000);
  const elapsed = (Date.now() - start) / 1000;
  const cpuSeconds = cpuSince(cpu);
  if (profiler && profile) await profiler.stopTo(profile);
  await m.stop();
  return { eventsPerSecond: events.length / elapsed, cpuSeconds, written: await offsetsWritten(kafka, prefix) };
}

/**
 * Offsets written under a prefix (records plus transaction markers), changelogs apart from
 * the rest: the per-record cost of producing is most of a hop's cost, so these counts say
 * where a run's producing went.
 */
async function offsetsWritten(kafka: Kafka, prefix: string): Promise<{ changelogs: number; outputs: number }> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const topics = (await admin.listTopics()).filter((t) => t.startsWith(prefix) && !/(agent-outputs|transitions|episode-outcomes)$/.test(t));
    const totals = { changelogs: 0, outputs: 0 };
    for (const topic of topics) {
      const n = (await admin.fetchTopicOffsets(topic)).reduce((sum, p) => sum + Number(p.high) - Number(p.low), 0);
      if (topic.endsWith('.changelog')) totals.changelogs += n;
      else totals.outputs += n;
    }
    return totals;
  } finally {
    await admin.disconnect();
  }
}

/**
 * Each stage alone on the same input (`--stages`): raw events -> active sets until every set is
 * out, then, on the sets that run wrote, active sets -> groups. CPU per raw event of each says
 * which hop costs what.
 */
async function stageRuns(kafka: Kafka, brokers: string[], events: AgentEvent[]): Promise<{ sets: RunResult; groups: RunResult }> {
  const prefix = `bench.stages.${randomUUID().slice(0, 8)}.`;
  const catalog = await setupTopics(kafka, prefix);
  const env = {
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: '2',
    SRPO_DERIVED_PARTITIONS: '2',
    SRPO_LOG_LEVEL: 'warn',
    ...tuning(),
  };
  for (const roles of ['sets', 'groups']) {
    const warm = new Materializer(loadMaterializerConfig({ ...env, SRPO_MATERIALIZER_ROLES: roles }));
    await warm.start();
    await warm.stop();
  }
  await produceAll(kafka, catalog, events);
  const transitions = events.filter((e) => e.type === 'Transition').length;
  const timed = async (roles: string, done: (m: Materializer) => Promise<number>, target: number): Promise<RunResult> => {
    const m = new Materializer(loadMaterializerConfig({ ...env, SRPO_MATERIALIZER_ROLES: roles }));
    const profile = argValue('profile');
    const profiler = profile ? await startProfiler() : undefined;
    const start = Date.now();
    const cpu = process.cpuUsage();
    await m.start();
    await waitForCounter(() => done(m), target, 600_000);
    const result = { eventsPerSecond: events.length / ((Date.now() - start) / 1000), cpuSeconds: cpuSince(cpu) };
    if (profiler && profile) await profiler.stopTo(`${profile}.${roles}`);
    await m.stop();
    return result;
  };
  const sets = await timed('sets', (m) => m.metrics.value('stream_records_out_total', { topic: catalog.activeSets.name }), transitions);
  const groups = await timed('groups', (m) => m.metrics.value('advantage-group-materializer_groups_ready_total', { reason: 'SIZE' }), transitions / 4);
  return { sets, groups };
}

async function scrape(port: number, metric: string): Promise<number> {
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then(
    (r) => r.text(),
    () => '',
  );
  let total = 0;
  for (const line of text.split('\n')) if (line.startsWith(metric)) total += Number(line.split(' ').pop());
  return total;
}

/** The two sub-topologies as two processes (one per core), end to end until every group is out. */
async function twoProcessRun(kafka: Kafka, brokers: string[], events: AgentEvent[]): Promise<number> {
  const prefix = `bench.mat2.${randomUUID().slice(0, 8)}.`;
  const catalog = await setupTopics(kafka, prefix);
  const base = {
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: '2',
    SRPO_DERIVED_PARTITIONS: '2',
    SRPO_LOG_LEVEL: 'warn',
    ...tuning(),
  };
  const warm = new Materializer(loadMaterializerConfig(base));
  await warm.start();
  await warm.stop();
  await produceAll(kafka, catalog, events);
  const port = 39_000 + Math.floor(Math.random() * 1000);
  const start = Date.now();
  const sets = spawnApp('materializer', { ...base, SRPO_MATERIALIZER_ROLES: 'sets' });
  const groupsProc = spawnApp('materializer', { ...base, SRPO_MATERIALIZER_ROLES: 'groups', SRPO_METRICS_PORT: String(port) });
  const groups = events.filter((e) => e.type === 'Transition').length / 4;
  await waitForCounter(() => scrape(port, 'srpo_advantage_group_materializer_groups_ready_total'), groups, 600_000);
  const elapsed = (Date.now() - start) / 1000;
  sets.kill('SIGTERM');
  groupsProc.kill('SIGTERM');
  return events.length / elapsed;
}

/** Baseline: consume the raw topics and re-produce the same bytes in one transaction per chunk. */
/**
 * Consumes `from` and transactionally re-produces the same bytes to `to`, on the runtime's
 * client interface (`--client kafkajs|platformatic`, default kafkajs): one transactional
 * producer per input partition, 500 records per transaction with the offsets, the
 * materializer runner's settings; so each client is compared with its own floor. Resolves
 * once started; `done()` counts the records re-produced.
 */
async function startRelay(client: StreamClient, groupId: string, from: string[], to: string): Promise<{ done(): number; stop(): Promise<void> }> {
  const producers = new Map<number, TransactionalProducer>();
  const consumer = client.groupConsumer({
    groupId,
    topics: from,
    sessionTimeoutMs: 30_000,
    heartbeatIntervalMs: 3_000,
    rebalanceTimeoutMs: 60_000,
    maxWaitMs: 250,
  });
  let done = 0;
  await consumer.start({
    onAssignment: () => undefined,
    onFatal: (e) => console.error('relay consumer failed', e),
    onBatch: async (batch) => {
      let producer = producers.get(batch.partition);
      if (!producer) {
        producer = await client.transactionalProducer(`${groupId}-${batch.partition}`, { transactionTimeoutMs: 60_000 });
        producers.set(batch.partition, producer);
      }
      for (let i = 0; i < batch.records.length; i += 500) {
        const chunk = batch.records.slice(i, i + 500);
        const tx = await producer.begin();
        await tx.send(chunk.map((m) => ({ topic: to, key: m.key, value: m.value })));
        const last = chunk[chunk.length - 1].offset;
        await tx.sendOffsets(groupId, batch.topic, batch.partition, last + 1);
        await tx.commit();
        batch.resolve(last);
        done += chunk.length;
      }
    },
  });
  return {
    done: () => done,
    async stop() {
      await consumer.stop();
      for (const p of producers.values()) await p.close();
    },
  };
}

/**
 * The baseline: raw events consumed and re-produced as they are, exactly once. With `hops: 2`,
 * a second relay re-produces the first one's output again, concurrently, in the same process:
 * the least a topology of two exactly-once hops that carries every input byte through both
 * (raw -> active sets -> groups) can cost with this client, whatever its processors do.
 */
async function passThroughRun(kafka: Kafka, events: AgentEvent[], hops: 1 | 2 = 1): Promise<RunResult> {
  const prefix = `bench.pass.${randomUUID().slice(0, 8)}.`;
  const catalog = await setupTopics(kafka, prefix);
  await produceAll(kafka, catalog, events);
  const start = Date.now();
  const cpu = process.cpuUsage();
  const client = createStreamClient(
    argValue('client') === 'platformatic' ? 'platformatic' : 'kafkajs',
    { brokers: ensureKafka(), clientId: 'bench-relay' },
    kafka,
  );
  const relay = (groupId: string, from: string[], to: string) => startRelay(client, groupId, from, to);
  const first = await relay(`${prefix}passthrough`, [catalog.agentOutputs.name, catalog.transitions.name], catalog.activeSets.name);
  const second = hops === 2 ? await relay(`${prefix}passthrough2`, [catalog.activeSets.name], catalog.advantageGroups.name) : undefined;
  const last = second ?? first;
  await waitForCounter(async () => last.done(), events.length, 600_000);
  const elapsed = (Date.now() - start) / 1000;
  const cpuSeconds = cpuSince(cpu);
  await first.stop();
  await second?.stop();
  return { eventsPerSecond: events.length / elapsed, cpuSeconds };
}

function rssMb(child: ChildProcess): number {
  const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

/** RSS of a materializer process holding N open episodes (outputs whose transition has not come). */
async function memoryRun(kafka: Kafka, brokers: string[], open: number): Promise<{ episodes: number; rssMb: number }[]> {
  const prefix = `bench.mem.${randomUUID().slice(0, 8)}.`;
  const catalog = await setupTopics(kafka, prefix);
  const env = {
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: '2',
    SRPO_DERIVED_PARTITIONS: '2',
    SRPO_LOG_LEVEL: 'warn',
    SRPO_SET_TTL_MS: String(3_600_000),
  };
  const child = spawnApp('materializer', env);
  await sleep(3000);
  const points: { episodes: number; rssMb: number }[] = [{ episodes: 0, rssMb: rssMb(child) }];
  const sdk = new AgentEventsProducer({ kafka, topics: catalog });
  const steps = [open / 4, open / 2, open];
  let produced = 0;
  const admin = kafka.admin();
  await admin.connect();
  for (const target of steps) {
    const batch: AgentEvent[] = [];
    for (let e = produced; e < target; e++) batch.push({ type: 'AgentOutput', value: bigOutput(`open${e}`, 0, 1_700_000_000_000 + e) });
    for (let i = 0; i < batch.length; i += 1000) await sdk.emitBatch(batch.slice(i, i + 1000));
    produced = target;
    // Wait until the materializer's consumer group has committed everything produced so far.
    const deadline = Date.now() + 600_000;
    for (;;) {
      const committed = await admin.fetchOffsets({ groupId: `${prefix}materializer.sets`, topics: [catalog.agentOutputs.name] });
      const total = committed[0].partitions.reduce((a, p) => a + Math.max(0, Number(p.offset)), 0);
      if (total >= produced || Date.now() > deadline) break;
      await sleep(500);
    }
    await sleep(2000);
    points.push({ episodes: target, rssMb: rssMb(child) });
  }
  await admin.disconnect();
  await sdk.disconnect();
  child.kill('SIGTERM');
  return points;
}

async function main(): Promise<void> {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'bench-materializer' });
  const episodes = arg('episodes', 12_000);
  const open = arg('open', 100_000);
  const events = workload(episodes, 1_700_000_000_000);
  const codec = new EventCodec();
  const outputBytes = codec.encode('AgentOutput', events[0].value as never).length;
  console.log(`workload: ${episodes} episodes, ${events.length} events (outputs ~${outputBytes} B, sets of 1-4 members), 2 partitions`);
  // CPU seconds of this process over each timed window: steadier than events/s on a shared
  // machine, and the pass-through's figure is what the same events cost without any processing.
  const cpuNote = (r: RunResult) => `CPU ${r.cpuSeconds.toFixed(2)} s, ${((r.cpuSeconds * 1e6) / events.length).toFixed(0)} µs/event`;
  const passRun = process.argv.includes('--no-baseline') ? { eventsPerSecond: NaN, cpuSeconds: NaN } : await passThroughRun(kafka, events);
  const pass = passRun.eventsPerSecond;
  console.log(`pass-through (consume + transactional re-produce): ${pass.toFixed(0)} events/s  (${cpuNote(passRun)})`);
  if (process.argv.includes('--two-hop')) {
    const twoHop = await passThroughRun(kafka, events, 2);
    console.log(
      `two-hop pass-through (the same, twice in a row): ${twoHop.eventsPerSecond.toFixed(0)} events/s  (ratio ${(twoHop.eventsPerSecond / pass).toFixed(2)}; ${cpuNote(twoHop)})`,
    );
  }
  if (argValue('state') === 'both') {
    stateStore = 'memory';
    const memRun = await materializerRun(kafka, brokers, events);
    console.log(
      `materializer (heap stores), raw events -> advantage groups: ${memRun.eventsPerSecond.toFixed(0)} events/s  (ratio ${(memRun.eventsPerSecond / pass).toFixed(2)}; ${cpuNote(memRun)})`,
    );
    stateStore = 'lmdb';
  }
  const matRun = await materializerRun(kafka, brokers, events);
  const mat = matRun.eventsPerSecond;
  console.log(
    `materializer (${stateStore} state), one process, raw events -> advantage groups:   ${mat.toFixed(0)} events/s  (ratio ${(mat / pass).toFixed(2)}; ${cpuNote(matRun)})`,
  );
  if (matRun.written)
    console.log(
      `  offsets written: ${matRun.written.outputs} to output and internal topics, ${matRun.written.changelogs} to changelogs (pass-through: ${events.length} records plus markers)`,
    );
  if (process.argv.includes('--stages')) {
    const stages = await stageRuns(kafka, brokers, events);
    console.log(`  stage alone, raw events -> active sets:  ${stages.sets.eventsPerSecond.toFixed(0)} raw events/s  (${cpuNote(stages.sets)})`);
    console.log(`  stage alone, active sets -> groups:      ${stages.groups.eventsPerSecond.toFixed(0)} raw events/s  (${cpuNote(stages.groups)})`);
  }
  if (process.argv.includes('--one-process')) return;
  const mat2 = await twoProcessRun(kafka, brokers, events);
  console.log(`materializer, sets and groups in two processes:            ${mat2.toFixed(0)} events/s  (ratio ${(mat2 / pass).toFixed(2)})`);
  if (open > 0) {
    const points = await memoryRun(kafka, brokers, open);
    console.log('open episodes -> materializer RSS');
    for (const p of points) console.log(`  ${String(p.episodes).padStart(7)}  ${p.rssMb.toFixed(0)} MB`);
    const [p0, , , p3] = points;
    console.log(`  ~${(((p3.rssMb - p0.rssMb) * 1024) / open).toFixed(1)} KB per open episode`);
  }
}

void main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
