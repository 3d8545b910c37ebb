import { ChildProcess, execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { AgentEvent, AgentEventsProducer, createKafka, ensureTopics, topicCatalog } from '@srpo/events';
import { AuditStore } from '@srpo/store';
import { groupedEpisodes, sleep, spawnApp, uniquePrefix, verifyExactlyOnce, waitForExit } from '@srpo/testing';

const PORT = 19492;
const EPISODES = 240;
const GROUP = 2;

/**
 * Broker faults in the middle of a run: agents (the SDK), materializer and learner
 * all active on a broker of their own, which is stopped (then, in the second test,
 * SIGKILLed) and started again 12 s later. Clients reconnect by themselves; the
 * run completes with nothing lost and nothing duplicated; the learner's health
 * endpoint reports the outage while it lasts.
 */
describe.each([['stop'], ['kill']])('broker %s mid-run', (how) => {
  const root = repoRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `srpo-fault-${how}-`));
  const kafkaEnv = { ...process.env, SRPO_KAFKA_PORT: String(PORT), SRPO_KAFKA_DIR: path.join(dir, 'kafka') };
  const kafkaSh = (verb: string) => execFileSync('bash', [path.join(root, 'infra', 'kafka', 'kafka.sh'), verb], { env: kafkaEnv, stdio: 'inherit' });
  const children: ChildProcess[] = [];

  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    kafkaSh('stop');
  });

  it('completes with every set once, every group once in the learner ledger, and reports the outage', async () => {
    kafkaSh('start');
    const brokers = [`127.0.0.1:${PORT}`];
    const prefix = uniquePrefix(`fault${how}`);
    const catalog = topicCatalog({ prefix, rawPartitions: 2, derivedPartitions: 1 });
    const kafka = createKafka({ brokers, clientId: 'fault-test', retries: 3 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const common = {
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_RAW_PARTITIONS: '2',
      SRPO_DERIVED_PARTITIONS: '1',
      SRPO_SESSION_TIMEOUT_MS: '6000',
      SRPO_LOG_LEVEL: 'info',
    };
    // Below Linux's ephemeral range (32768-60999): a port there can be taken by any outgoing socket.
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
    const health = async () =>
      fetch(`http://127.0.0.1:${port}/health`).then(
        (r) => r.status,
        () => 0,
      );
    const { events, setIds } = groupedEpisodes('f', EPISODES, GROUP);
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    // An agent keeps retrying a batch until the broker takes it: the idempotent producer and the
    // materializer's dedupe make a repeated batch harmless.
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
    const healthDuringOutage: number[] = [];
    const fault = (async () => {
      await sleep(6000);
      kafkaSh(how);
      const until = Date.now() + 12_000;
      while (Date.now() < until) {
        healthDuringOutage.push(await health());
        await sleep(1000);
      }
      kafkaSh('start');
    })();
    const chunk = 20;
    for (let i = 0; i < events.length; i += chunk) {
      await send(events.slice(i, i + chunk));
      await sleep(250);
    }
    await fault;
    await sdk.disconnect();

    // Wait for the learner to have applied every ready group.
    const groups = EPISODES / GROUP;
    let applied = 0;
    const deadline = Date.now() + 150_000;
    while (Date.now() < deadline && applied < groups) {
      // The learner's own API, asked often: the test goes on as soon as the last update is in.
      await sleep(250);
      const updates = (await fetch(`http://127.0.0.1:${port}/updates?policy=worker&limit=1000`).then(
        (r) => (r.ok ? r.json() : []),
        () => [],
      )) as unknown[];
      applied = updates.length * (4 / GROUP);
    }
    expect(healthDuringOutage.filter((s) => s === 503).length).toBeGreaterThan(0);
    expect(await health()).toBe(200);

    const report = await verifyExactlyOnce(kafka, catalog, setIds);
    expect(report.openTransactions).toEqual([]);
    expect(report.missingSets).toEqual([]);
    expect(report.duplicateSets).toEqual([]);
    expect(report.multiplyGroupedSets).toEqual([]);
    expect(report.ungroupedSets).toEqual([]);
    expect(report.groups).toBe(groups);

    for (const c of children) c.kill('SIGTERM');
    // The ledger is the learner's SQLite file: read once the learner (children[1]) is gone. The
    // materializer's stop is not what this test checks (afterAll kills what is left).
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
  }, 300_000);
});
