/**
 * bench/materializer/restart: time from a materializer's start until its tasks are restored
 * and processing, and its heap and RSS then, with N retained episodes, for each way of
 * keeping state, side by side on one changelog:
 *
 *   - `lmdb`         the local LMDB copy is there: restore reads it plus the changelog tail;
 *   - `lmdb-deleted` the copy was deleted: restore reads the whole changelog into a new copy;
 *   - `memory`       heap stores (SRPO_STATE_STORE=memory), the state before disk-backed stores.
 *
 * The episodes are complete (one output, one transition with its reward) and kept for
 * duplicate detection (SRPO_DEDUPE_RETENTION_MS of 30 days), as a production materializer
 * keeps its dedupe window: each is one record of the set stage's episodes store.
 *
 *   npm run build && npm run build:bench && node dist-bench/bench/materializer/restart.js [--episodes 200000] [--rounds 2]
 *
 * Not a test: it prints figures; docs/benchmarks.md and docs/state.md record them.
 */
import { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { AgentEvent, AgentEventsProducer, createKafka, ensureTopics, topicCatalog } from '@srpo/events';
import { ensureKafka, output, sleep, spawnApp, transition, uniquePrefix, waitForExit } from '@srpo/testing';
import { cpuDescription } from '../cpu';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};

const RAW_PARTITIONS = 2;
const DERIVED_PARTITIONS = 1;
/** Tasks of both sub-topologies: each logs 'task ready' once restored. */
const TASKS = RAW_PARTITIONS + DERIVED_PARTITIONS;

function episodes(from: number, to: number, time0: number): AgentEvent[] {
  const events: AgentEvent[] = [];
  for (let e = from; e < to; e++) {
    const id = `ep${e}`;
    events.push({ type: 'AgentOutput', value: output(id, 0, { eventTimeMs: time0 + Math.floor(e / 100), startedAtMs: time0 + Math.floor(e / 100) }) });
    events.push({
      type: 'Transition',
      value: transition(id, [0], {
        groupKey: `task-${Math.floor(e / 4)}`,
        expectedGroupSize: 4,
        reward: e % 3 === 0 ? 1 : 0,
        eventTimeMs: time0 + Math.floor(e / 100),
      }),
    });
  }
  return events;
}

function readyLines(log: string, since: number): number {
  return fs
    .readFileSync(log, 'utf8')
    .slice(since)
    .split('\n')
    .filter((l) => l.includes('"msg":"task ready"')).length;
}

async function metric(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : NaN;
}

async function main(): Promise<void> {
  const n = arg('episodes', 200_000);
  const rounds = arg('rounds', 2);
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'bench-restart' });
  const prefix = uniquePrefix('restart');
  const catalog = topicCatalog({ prefix, rawPartitions: RAW_PARTITIONS, derivedPartitions: DERIVED_PARTITIONS });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, catalog.all());
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-bench-restart-'));
  const log = path.join(stateDir, 'materializer.log');
  const port = 19_000 + Math.floor(Math.random() * 1000);
  const env = (extra: Record<string, string>) => ({
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: String(RAW_PARTITIONS),
    SRPO_DERIVED_PARTITIONS: String(DERIVED_PARTITIONS),
    SRPO_DEDUPE_RETENTION_MS: String(30 * 86_400_000),
    SRPO_SESSION_TIMEOUT_MS: '6000',
    SRPO_STATE_DIR: path.join(stateDir, 'state'),
    SRPO_METRICS_PORT: String(port),
    SRPO_LOG_LEVEL: 'info',
    NODE_OPTIONS: '--max-old-space-size=8192',
    ...extra,
  });

  const cpu = cpuDescription();
  console.log(`# materializer restart with ${n} retained episodes; ${cpu.model}, ${cpu.vector}, ${os.cpus().length} vCPUs`);
  // Build the state: every episode processed, its set grouped.
  const build = spawnApp('materializer', env({}), log);
  const sdk = new AgentEventsProducer({ kafka, topics: catalog });
  const t0 = Date.now();
  const time0 = 1_700_000_000_000;
  for (let i = 0; i < n; i += 5000) await sdk.emitBatch(episodes(i, Math.min(n, i + 5000), time0));
  await sdk.disconnect();
  const groupsWanted = n / 4;
  for (;;) {
    const offsets = await admin.fetchTopicOffsets(catalog.advantageGroups.name);
    const committed = await admin.fetchOffsets({ groupId: `${prefix}materializer.groups`, topics: [catalog.activeSets.name] });
    const consumed = committed[0].partitions.reduce((a, p) => a + Math.max(0, Number(p.offset)), 0);
    const sets = (await admin.fetchTopicOffsets(catalog.activeSets.name)).reduce((a, o) => a + Number(o.high), 0);
    if (offsets.reduce((a, o) => a + Number(o.high), 0) >= groupsWanted && consumed >= sets - DERIVED_PARTITIONS) break;
    await sleep(1000);
  }
  const buildHeap = await metric(port, 'srpo_process_heap_used_bytes');
  const buildRss = await metric(port, 'srpo_process_rss_bytes');
  console.log(
    `built in ${((Date.now() - t0) / 1000).toFixed(0)} s; heap ${(buildHeap / 2 ** 20).toFixed(0)} MiB, RSS ${(buildRss / 2 ** 20).toFixed(0)} MiB at the end (lmdb)`,
  );
  build.kill('SIGTERM');
  await waitForExit(build);
  await sleep(7000);

  let probes = 0;
  const rows: string[] = ['| state | start to processing (s) | heap used (MiB) | RSS (MiB) |', '| --- | ---: | ---: | ---: |'];
  const measure = async (label: string, extra: Record<string, string>, before?: () => void) => {
    before?.();
    const since = fs.existsSync(log) ? fs.statSync(log).size : 0;
    const started = Date.now();
    const child: ChildProcess = spawnApp('materializer', env(extra), log);
    // Tasks start on their first input: probe episodes (new ids, two full groups) reach every one.
    const probe = new AgentEventsProducer({ kafka, topics: catalog });
    await probe.emitBatch(episodes(n + probes, n + probes + 8, time0));
    await probe.disconnect();
    probes += 8;
    while (readyLines(log, since) < TASKS) {
      if (child.exitCode !== null) throw new Error(`materializer exited (${child.exitCode}); see ${log}`);
      await sleep(100);
    }
    const seconds = (Date.now() - started) / 1000;
    await sleep(2000);
    const heap = await metric(port, 'srpo_process_heap_used_bytes');
    const rss = await metric(port, 'srpo_process_rss_bytes');
    child.kill('SIGTERM');
    await waitForExit(child);
    // The group coordinator needs the session to lapse for a clean next start.
    await sleep(7000);
    rows.push(`| ${label} | ${seconds.toFixed(1)} | ${(heap / 2 ** 20).toFixed(0)} | ${(rss / 2 ** 20).toFixed(0)} |`);
    console.log(rows[rows.length - 1]);
  };
  for (let r = 0; r < rounds; r++) {
    await measure('lmdb (copy kept)', {});
    await measure('memory (heap stores)', { SRPO_STATE_STORE: 'memory' });
    await measure('lmdb (copy deleted)', {}, () => fs.rmSync(path.join(stateDir, 'state'), { recursive: true, force: true }));
  }
  await admin.disconnect();
  console.log(rows.join('\n'));
  fs.rmSync(stateDir, { recursive: true, force: true });
}

void main().catch((e) => {
  console.error(e);
  process.exit(1);
});
