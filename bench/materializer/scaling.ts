/**
 * bench/materializer/scaling: the materializer's cost as the work is spread (issue #43). For each
 * cell PxI (P raw and derived partitions, I materializer instances, I ≤ P), on fresh topics under a
 * prefix of its own: I processes of the real app (dist/apps/materializer, both roles each, as
 * `srpo materializer` runs, one LMDB state directory each) are started and waited for until both
 * consumer groups are stable with I members; then the workload of run.ts is produced and the
 * cell is timed from the first event produced until the last advantage group is committed.
 *
 *   npm run build && npm run build:bench && node dist-bench/bench/materializer/scaling.js
 *     [--episodes 48000]            episodes per cell (3.5 events each; a multiple of 4: groups of 4)
 *     [--cells 1x1,2x1,2x2,4x1,4x2,4x3]
 *     [--client kafkajs|platformatic] the runtime's Kafka client (SRPO_KAFKA_CLIENT)
 *     [--compression none]          only `none`: see below
 *     [--keep]                      keep each cell's topics (default: deleted once measured)
 *
 * Per cell: events/s end to end; CPU µs per event (the instances' user + system CPU from
 * /proc/<pid>/stat over the timed window, all threads; the producing bench process apart);
 * bytes written per input event on active-sets + advantage-groups + the changelogs, from the
 * partitions' log sizes on the broker (DescribeLogDirs: record batches as stored, headers,
 * keys and transaction markers included; not __consumer_offsets or __transaction_state),
 * and their ratio to the raw topics' log size (the input, measured the same way).
 *
 * Compression cannot be chosen without changing product code: AgentEventsProducer sends with
 * CompressionTypes.None, and neither stream client's transactional producer takes a
 * compression setting, nor does any SRPO_* variable (docs/benchmarks.md). `--compression`
 * other than `none` is refused with that explanation.
 *
 * Not a test: it prints a markdown table and one JSON line; docs/benchmarks.md records them.
 */
import { ChildProcess, execFileSync } from 'child_process';
import { randomUUID } from 'crypto';
import * as fs from 'fs';
import { createRequire } from 'module';
import * as os from 'os';
import * as path from 'path';
import type * as Platformatic from '@platformatic/kafka';
import type { Kafka } from 'kafkajs';
import { AgentEventsProducer, createKafka, ensureTopics, topicCatalog, type TopicCatalog } from '@srpo/events';
import { ensureKafka, sleep, spawnApp, waitForExit } from '@srpo/testing';
import { workload } from './workload';

const ALL_CELLS = '1x1,2x1,2x2,4x1,4x2,4x3';
const TIME0 = 1_700_000_000_000;
/** Episodes generated and produced at a time (about 875 events): the workload never sits in memory whole. */
const CHUNK_EPISODES = 250;

function argValue(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

interface Cell {
  partitions: number;
  instances: number;
}

function parseCells(text: string): Cell[] {
  return text.split(',').map((c) => {
    const m = /^(\d+)x(\d+)$/.exec(c.trim());
    if (!m) throw new Error(`--cells: "${c}" is not PxI (partitions x instances)`);
    const cell = { partitions: Number(m[1]), instances: Number(m[2]) };
    if (cell.partitions < 1 || cell.instances < 1 || cell.instances > cell.partitions)
      throw new Error(`--cells: ${c}: need 1 ≤ instances ≤ partitions (an instance beyond the partitions would idle)`);
    return cell;
  });
}

/** Bytes on the broker of each topic's partitions (DescribeLogDirs; one broker, replication 1 locally). */
async function logSizes(brokers: string[], topics: { name: string; partitions: number[] }[]): Promise<Map<string, number>> {
  const pk = createRequire(__filename)('@platformatic/kafka') as typeof Platformatic;
  const admin = new pk.Admin({ clientId: 'bench-scaling-logdirs', bootstrapBrokers: brokers });
  try {
    const sizes = new Map<string, number>();
    const described = await admin.describeLogDirs({ topics: topics.filter((t) => t.partitions.length > 0) });
    for (const broker of described)
      for (const dir of broker.results)
        for (const t of dir.topics) for (const p of t.partitions) sizes.set(t.name, (sizes.get(t.name) ?? 0) + Number(p.partitionSize));
    return sizes;
  } finally {
    await admin.close();
  }
}

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** User + system CPU seconds of a process (all its threads, exited ones included). */
function processCpuSeconds(child: ChildProcess): number {
  const stat = fs.readFileSync(`/proc/${child.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields from the 3rd (state) on: utime and stime are the 14th and 15th.
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** Until both sub-topologies' consumer groups are stable with `instances` members each. */
async function waitForGroups(kafka: Kafka, prefix: string, instances: number, children: ChildProcess[], timeoutMs: number): Promise<void> {
  const groupIds = [`${prefix}materializer.sets`, `${prefix}materializer.groups`];
  const admin = kafka.admin();
  await admin.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const dead = children.find((c) => c.exitCode !== null || c.signalCode !== null);
      if (dead) throw new Error(`materializer instance ${dead.pid} exited (${dead.exitCode ?? dead.signalCode}) before its group was stable`);
      const { groups } = await admin.describeGroups(groupIds);
      if (groups.length === 2 && groups.every((g) => g.state === 'Stable' && g.members.length === instances)) return;
      if (Date.now() > deadline)
        throw new Error(
          `groups not stable with ${instances} members after ${timeoutMs} ms: ${groups.map((g) => `${g.groupId} ${g.state} ${g.members.length}`).join(', ')}`,
        );
      await sleep(250);
    }
  } finally {
    await admin.disconnect();
  }
}

/** Counts committed records on the advantage-groups topic (read_committed, from the beginning). */
async function startGroupCounter(kafka: Kafka, topic: string, groupId: string): Promise<{ count(): number; lastAt(): number; stop(): Promise<void> }> {
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 100, readUncommitted: false });
  let count = 0;
  let lastAt = 0;
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const joined = new Promise<void>((resolve) => consumer.on(consumer.events.GROUP_JOIN, () => resolve()));
  await consumer.run({
    eachBatch: async ({ batch }) => {
      count += batch.messages.length;
      if (batch.messages.length > 0) lastAt = Date.now();
    },
  });
  await joined;
  return { count: () => count, lastAt: () => lastAt, stop: () => consumer.disconnect() };
}

async function stopInstances(children: ChildProcess[]): Promise<void> {
  await Promise.all(
    children.map(async (c) => {
      if (c.exitCode !== null || c.signalCode !== null) return;
      c.kill('SIGTERM');
      const exited = await Promise.race([waitForExit(c).then(() => true), sleep(30_000).then(() => false)]);
      if (!exited) c.kill('SIGKILL');
    }),
  );
}

interface CellResult {
  cell: string;
  partitions: number;
  instances: number;
  events: number;
  groups: number;
  /** Groups counted on advantage-groups one second after the last expected one (more: duplicates). */
  groupsSeen: number;
  /** Spawn until both consumer groups were stable: not timed. */
  startupSeconds: number;
  /** First event produced until the last one was acknowledged. */
  produceSeconds: number;
  /** First event produced until the last group was read (committed) from advantage-groups. */
  seconds: number;
  eventsPerSecond: number;
  instanceCpuSeconds: number[];
  cpuUsPerEvent: number;
  /** The bench process (generating, encoding and producing the workload, counting groups). */
  benchCpuSeconds: number;
  bytes: { input: number; activeSets: number; advantageGroups: number; changelogs: number; other: number; otherTopics: Record<string, number> };
  outputBytesPerEvent: number;
  outputToInput: number;
}

async function runCell(kafka: Kafka, brokers: string[], cell: Cell, episodes: number, client: string): Promise<CellResult> {
  const { partitions: p, instances } = cell;
  const prefix = `bench.scale.${p}x${instances}.${randomUUID().slice(0, 8)}.`;
  const catalog: TopicCatalog = topicCatalog({ prefix, rawPartitions: p, derivedPartitions: p });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, catalog.all());
  const stateRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-bench-scaling-'));
  const base = {
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: String(p),
    SRPO_DERIVED_PARTITIONS: String(p),
    SRPO_LOG_LEVEL: 'warn',
    SRPO_STATE_STORE: 'lmdb',
    SRPO_KAFKA_CLIENT: client,
  };
  const logs = Array.from({ length: instances }, (_, i) => path.join(stateRoot, `instance-${i}.log`));
  const spawned = Date.now();
  const children = logs.map((log, i) => spawnApp('materializer', { ...base, SRPO_STATE_DIR: path.join(stateRoot, `state-${i}`) }, log));
  let counter: Awaited<ReturnType<typeof startGroupCounter>> | undefined;
  let failed = false;
  try {
    await waitForGroups(kafka, prefix, instances, children, 180_000);
    const startupSeconds = (Date.now() - spawned) / 1000;
    counter = await startGroupCounter(kafka, catalog.advantageGroups.name, `${prefix}bench-counter`);
    await sleep(1000);

    const groups = episodes / 4;
    const cpu0 = children.map(processCpuSeconds);
    const benchCpu = process.cpuUsage();
    const start = Date.now();
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    let events = 0;
    for (let first = 0; first < episodes; first += CHUNK_EPISODES) {
      const chunk = workload(Math.min(CHUNK_EPISODES, episodes - first), TIME0, first);
      await sdk.emitBatch(chunk);
      events += chunk.length;
    }
    const produceSeconds = (Date.now() - start) / 1000;
    await sdk.disconnect();
    const deadline = Date.now() + 900_000;
    while (counter.count() < groups) {
      const dead = children.find((c) => c.exitCode !== null || c.signalCode !== null);
      if (dead) throw new Error(`materializer instance ${dead.pid} exited (${dead.exitCode ?? dead.signalCode}) during the run`);
      if (Date.now() > deadline) throw new Error(`only ${counter.count()} of ${groups} groups after 900 s`);
      await sleep(20);
    }
    const seconds = (counter.lastAt() - start) / 1000;
    const instanceCpuSeconds = children.map((c, i) => processCpuSeconds(c) - cpu0[i]);
    const used = process.cpuUsage(benchCpu);
    await sleep(1000);
    const groupsSeen = counter.count();
    await counter.stop();
    counter = undefined;
    await stopInstances(children);

    const topics = (await admin.listTopics()).filter((t) => t.startsWith(prefix));
    const withPartitions = await Promise.all(topics.map(async (name) => ({ name, partitions: (await admin.fetchTopicOffsets(name)).map((o) => o.partition) })));
    const sizes = await logSizes(brokers, withPartitions);
    const raw = new Set([catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name]);
    const bytes: CellResult['bytes'] = { input: 0, activeSets: 0, advantageGroups: 0, changelogs: 0, other: 0, otherTopics: {} };
    for (const [topic, size] of sizes) {
      if (raw.has(topic)) bytes.input += size;
      else if (topic === catalog.activeSets.name) bytes.activeSets += size;
      else if (topic === catalog.advantageGroups.name) bytes.advantageGroups += size;
      else if (topic.endsWith('.changelog')) bytes.changelogs += size;
      else if (size > 0) {
        bytes.other += size;
        bytes.otherTopics[topic.slice(prefix.length)] = size;
      }
    }
    const output = bytes.activeSets + bytes.advantageGroups + bytes.changelogs;
    const cpuSeconds = instanceCpuSeconds.reduce((a, b) => a + b, 0);
    return {
      cell: `${p}x${instances}`,
      partitions: p,
      instances,
      events,
      groups,
      groupsSeen,
      startupSeconds,
      produceSeconds,
      seconds,
      eventsPerSecond: events / seconds,
      instanceCpuSeconds,
      cpuUsPerEvent: (cpuSeconds * 1e6) / events,
      benchCpuSeconds: (used.user + used.system) / 1e6,
      bytes,
      outputBytesPerEvent: output / events,
      outputToInput: output / bytes.input,
    };
  } catch (e) {
    failed = true;
    console.error(`cell ${p}x${instances} failed; instance logs kept under ${stateRoot}`);
    throw e;
  } finally {
    await counter?.stop().catch(() => undefined);
    await stopInstances(children);
    if (!process.argv.includes('--keep')) {
      const topics = (await admin.listTopics()).filter((t) => t.startsWith(prefix));
      await admin.deleteTopics({ topics }).catch((e: unknown) => console.error(`could not delete ${prefix}* topics`, e));
      await admin.deleteGroups([`${prefix}materializer.sets`, `${prefix}materializer.groups`, `${prefix}bench-counter`]).catch(() => undefined);
    }
    await admin.disconnect();
    if (!failed) fs.rmSync(stateRoot, { recursive: true, force: true });
  }
}

const n = (x: number, digits = 0) => x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

async function main(): Promise<void> {
  const compression = argValue('compression') ?? 'none';
  if (compression !== 'none') {
    console.error(
      `--compression ${compression}: not settable without changing product code. AgentEventsProducer sends every batch with ` +
        'CompressionTypes.None; the stream runtime’s transactional producers (kafkajs and @platformatic/kafka clients) take no ' +
        'compression setting and no SRPO_* variable sets one. A topic-level compression.type (broker-side) would be the only way ' +
        'without product changes, and kafkajs ships only a gzip codec: lz4/zstd batches could not be read back by the kafkajs ' +
        'consumers (the default client, and changelog restore on either). See docs/benchmarks.md.',
    );
    process.exit(2);
  }
  const episodes = Math.ceil(Number(argValue('episodes') ?? 48_000) / 4) * 4;
  const cells = parseCells(argValue('cells') ?? ALL_CELLS);
  const client = argValue('client') === 'platformatic' ? 'platformatic' : 'kafkajs';
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'bench-materializer-scaling' });
  console.log(
    `workload: ${episodes} episodes (${(episodes * 3.5).toLocaleString('en-US')} events: outputs ~870 B, sets of 1-4, groups of 4) per cell; ` +
      `client ${client}; compression none; ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'})`,
  );
  const results: CellResult[] = [];
  for (const cell of cells) {
    const r = await runCell(kafka, brokers, cell, episodes, client);
    results.push(r);
    console.log(
      `  ${r.cell}: ${n(r.eventsPerSecond)} events/s in ${r.seconds.toFixed(1)} s (produced in ${r.produceSeconds.toFixed(1)} s, start-up ${r.startupSeconds.toFixed(1)} s), ` +
        `${n(r.cpuUsPerEvent)} µs CPU/event, ${n(r.outputBytesPerEvent)} B out/event, groups ${r.groupsSeen}/${r.groups}`,
    );
  }
  console.log('');
  console.log(
    "| P x I | events/s | seconds | CPU µs / event | instances' CPU s | bench CPU s | input B / event | active-sets B / event | advantage-groups B / event | changelogs B / event | output B / event | output / input |",
  );
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const r of results) {
    const per = (b: number) => n(b / r.events);
    console.log(
      `| ${r.partitions} x ${r.instances} | ${n(r.eventsPerSecond)} | ${r.seconds.toFixed(1)} | ${n(r.cpuUsPerEvent)} | ${r.instanceCpuSeconds.map((s) => s.toFixed(1)).join(' + ')} | ` +
        `${r.benchCpuSeconds.toFixed(1)} | ${per(r.bytes.input)} | ${per(r.bytes.activeSets)} | ${per(r.bytes.advantageGroups)} | ${per(r.bytes.changelogs)} | ` +
        `${per(r.bytes.activeSets + r.bytes.advantageGroups + r.bytes.changelogs)} | ${r.outputToInput.toFixed(2)} |`,
    );
  }
  const others = results.filter((r) => r.bytes.other > 0);
  if (others.length > 0)
    console.log(`\nother topics written (not in the output bytes): ${others.map((r) => `${r.cell} ${JSON.stringify(r.bytes.otherTopics)}`).join('; ')}`);
  const dup = results.filter((r) => r.groupsSeen !== r.groups);
  if (dup.length > 0) console.log(`\nWARNING: groups read differ from groups expected: ${dup.map((r) => `${r.cell} ${r.groupsSeen}/${r.groups}`).join(', ')}`);
  console.log('');
  console.log(
    JSON.stringify({
      bench: 'materializer-scaling',
      date: new Date().toISOString(),
      episodes,
      client,
      compression,
      bytesFrom: 'DescribeLogDirs partition sizes',
      cells: results,
    }),
  );
}

void main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
