import { ChildProcess, execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { AgentEvent, AgentEventsProducer, createKafka, describeTopicSettings, ensureTopics, topicCatalog } from '@srpo/events';
import { AuditStore } from '@srpo/store';
import { groupedEpisodes, sleep, spawnApp, uniquePrefix, verifyExactlyOnce, waitForExit } from '@srpo/testing';

const BASE_PORT = 19_592;
const EPISODES = 240;
const GROUP = 2;

/**
 * A three-broker KRaft cluster (infra/kafka/cluster.sh) under faults while agents (the SDK), the
 * materializer and the learner run (docs/reliability.md):
 * 1. the leader of the busiest raw partition is SIGKILLed and started again 7 s later (longer
 *    than the clients' 6 s session timeout);
 * 2. another broker is stalled with SIGSTOP for 10 s, then resumed.
 * Topics are replicated 3 ways with min.insync.replicas 2, so one broker down loses nothing and
 * stops nothing. The run completes untouched: every set once, every group once, every update
 * applied once.
 */
describe('three-broker cluster: leader SIGKILL and a stalled broker mid-run', () => {
  const root = repoRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-cluster-fault-'));
  const env = { ...process.env, SRPO_KAFKA_CLUSTER_DIR: path.join(dir, 'kafka'), SRPO_KAFKA_CLUSTER_PORT: String(BASE_PORT) };
  const cluster = (...args: string[]) => execFileSync('bash', [path.join(root, 'infra', 'kafka', 'cluster.sh'), ...args], { env, encoding: 'utf8' });
  const children: ChildProcess[] = [];

  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    try {
      for (const n of ['1', '2', '3']) execFileSync('bash', [path.join(root, 'infra', 'kafka', 'cluster.sh'), 'resume', n], { env, stdio: 'ignore' });
    } catch {
      // Not paused, or not running.
    }
    // The data is thrown away: SIGKILL instead of three controlled shutdowns (about 7 s).
    for (const n of ['1', '2', '3']) cluster('kill', n);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('completes with every set once, every group once in the learner ledger, and nothing lost', async () => {
    cluster('start');
    const brokers = cluster('brokers').trim().split(',');
    const prefix = uniquePrefix('cluster');
    const catalog = topicCatalog({ prefix, rawPartitions: 2, derivedPartitions: 1 });
    const kafka = createKafka({ brokers, clientId: 'cluster-fault-test', retries: 5 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    const settings = await describeTopicSettings(admin, catalog.all());
    expect(settings.map((s) => [s.name, s.replicationFactor, s.minInsyncReplicas])).toEqual(catalog.all().map((t) => [t.name, 3, 2]));
    const common = {
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_RAW_PARTITIONS: '2',
      SRPO_DERIVED_PARTITIONS: '1',
      SRPO_SESSION_TIMEOUT_MS: '6000',
      SRPO_LOG_LEVEL: 'info',
    };
    const port = 25_000 + Math.floor(Math.random() * 1000);
    const sqlite = path.join(dir, 'learner.sqlite');
    children.push(spawnApp('materializer', common, path.join(dir, 'materializer.log')));
    children.push(
      spawnApp(
        'learner',
        {
          ...common,
          SRPO_POLICY_ID: 'worker',
          SRPO_SQLITE_PATH: sqlite,
          SRPO_CHECKPOINT_DIR: path.join(dir, 'ck'),
          SRPO_SETS_PER_UPDATE: '4',
          SRPO_MAX_POLICY_LAG: '1000',
          SRPO_MODEL_CONFIG: JSON.stringify({ vocabSize: 16, dModel: 8, nLayers: 1, nHeads: 2, maxSeqLen: 16 }),
          SRPO_HTTP_PORT: String(port),
          SRPO_BACKEND: 'tensorflow',
        },
        path.join(dir, 'learner.log'),
      ),
    );
    const { events, setIds } = groupedEpisodes('c', EPISODES, GROUP);
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    const send = async (batch: AgentEvent[]) => {
      for (;;) {
        try {
          await sdk.emitBatch(batch);
          return;
        } catch {
          await sleep(1000);
        }
      }
    };
    const faults: Record<string, number | string> = {};
    const fault = (async () => {
      await sleep(5000);
      // The leader of the raw partition with the most records.
      const offsets = await admin.fetchTopicOffsets(catalog.agentOutputs.name);
      const busiest = offsets.reduce((a, b) => (Number(b.high) > Number(a.high) ? b : a)).partition;
      const meta = await admin.fetchTopicMetadata({ topics: [catalog.agentOutputs.name] });
      const leader = String(meta.topics[0].partitions.find((p) => p.partitionId === busiest)?.leader);
      faults.killed = leader;
      cluster('kill', leader);
      await sleep(7000);
      cluster('start', leader);
      faults.restartedAtMs = Date.now();
      await sleep(2000);
      const stalled = leader === '3' ? '2' : '3';
      faults.paused = stalled;
      cluster('pause', stalled);
      await sleep(10_000);
      cluster('resume', stalled);
      faults.resumedAtMs = Date.now();
    })();
    const chunk = 10;
    for (let i = 0; i < events.length; i += chunk) {
      await send(events.slice(i, i + chunk));
      await sleep(200);
    }
    await fault;
    await sdk.disconnect();

    const groups = EPISODES / GROUP;
    let applied = 0;
    const deadline = Date.now() + 150_000;
    while (Date.now() < deadline && applied < groups) {
      await sleep(250);
      const updates = (await fetch(`http://127.0.0.1:${port}/updates?policy=worker&limit=1000`).then(
        (r) => (r.ok ? r.json() : []),
        () => [],
      )) as unknown[];
      applied = updates.length * (4 / GROUP);
    }
    const completedAtMs = Date.now();
    const report = await verifyExactlyOnce(kafka, catalog, setIds);
    await admin.disconnect();
    expect(report.openTransactions).toEqual([]);
    expect(report.missingSets).toEqual([]);
    expect(report.duplicateSets).toEqual([]);
    expect(report.multiplyGroupedSets).toEqual([]);
    expect(report.ungroupedSets).toEqual([]);
    expect(report.groups).toBe(groups);

    for (const c of children) c.kill('SIGTERM');
    await waitForExit(children[1]);
    const store = await AuditStore.open({ kind: 'sqlite', path: sqlite });
    try {
      const updates = await store.listUpdates({ policyId: 'worker', limit: 1000 });
      const ledger: string[] = [];
      for (const u of updates) ledger.push(...(await store.getUpdate(u.updateId)).groups.map((g) => g.groupId));
      expect(ledger).toHaveLength(groups);
      expect(new Set(ledger).size).toBe(groups);
    } finally {
      await store.close();
    }
    // The figures docs/reliability.md reports.
    process.stdout.write(
      `${JSON.stringify({
        cluster: 'three-broker',
        episodes: EPISODES,
        killedLeader: faults.killed,
        paused: faults.paused,
        sets: setIds.length,
        groups,
        lost: report.missingSets.length,
        duplicated: report.duplicateSets.length + report.multiplyGroupedSets.length,
        completedAfterResumeMs: completedAtMs - Number(faults.resumedAtMs),
      })}\n`,
    );
  }, 300_000);
});
