import type { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Partitioners } from 'kafkajs';
import { AdvantageGroup, createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, toPlain } from '@srpo/events';
import {
  activeSet,
  advantageGroup,
  ensureKafka,
  member,
  runSrpo,
  SEED,
  sleep,
  spawnApp,
  tempDir,
  TINY_MODEL_JSON,
  uniquePrefix,
  waitForExit,
} from '@srpo/testing';

interface UpdateSummary {
  updateId: string;
  versionBefore: number;
  versionAfter: number;
  weightsHashAfter: string;
  checkpointUri: string;
}

interface ReplayJson {
  complete: boolean;
  counterfactual: boolean;
  matched: number;
  rows: { updateId: string; originalHash: string; replayHash: string | null; match: boolean; cause?: string }[];
  firstDivergence?: { cause: string };
}

const GROUPS = 6;
const SETS_PER_UPDATE = 2;

function groups(): AdvantageGroup[] {
  return Array.from({ length: GROUPS }, (_, i) => {
    const m = member({ outputId: `g${i}/o`, response: [4 + (i % 3), 5, 6], logpOld: [-2.5, -2.75, -3], version: 0 });
    return advantageGroup(`g${i}`, [{ set: activeSet(`g${i}/s`, [m]), advantage: i % 2 === 0 ? 1 : -1 }]);
  });
}

async function getJson<T>(port: number, url: string, init?: RequestInit): Promise<{ status: number; body: T }> {
  const res = await fetch(`http://127.0.0.1:${port}${url}`, init);
  return { status: res.status, body: (await res.json()) as T };
}

describe('audit and replay on a real learner run (real broker, real processes)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'audit-replay-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('audit');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = tempDir('audit');
  // Below Linux's ephemeral range (32768-60999): a port there can be taken by any outgoing socket.
  const port = 22_000 + Math.floor(Math.random() * 1000);
  const sqlite = path.join(dir, 'learner.sqlite');
  let updates: UpdateSummary[] = [];

  const cliEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_SQLITE_PATH: sqlite,
    SRPO_REPLAY_DIR: path.join(dir, 'replays'),
    SRPO_BACKEND: 'tensorflow',
    SRPO_LOG_LEVEL: 'error',
    ...extra,
  });

  const srpo = (args: string[], extra: Record<string, string> = {}) => runSrpo(args, cliEnv(extra));

  let learner: ChildProcess | undefined;

  beforeAll(async () => {
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    await producer.send({
      topic: catalog.advantageGroups.name,
      acks: -1,
      messages: groups().map((g) => ({ key: g.policyId, value: codec.encode('AdvantageGroup', g) })),
    });
    await producer.disconnect();
    learner = spawnApp(
      'learner',
      {
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_POLICY_ID: 'solver',
        SRPO_SQLITE_PATH: sqlite,
        SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
        SRPO_SETS_PER_UPDATE: String(SETS_PER_UPDATE),
        SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
        SRPO_SEED: String(SEED),
        SRPO_MAX_POLICY_LAG: '100',
        SRPO_SESSION_TIMEOUT_MS: '6000',
        // Its own consumer group: learners of other tests on this broker must not rebalance with it.
        SRPO_CONSUMER_GROUP: `${prefix}learner`,
        SRPO_HTTP_PORT: String(port),
        SRPO_BACKEND: 'tensorflow',
        SRPO_LOG_LEVEL: 'info',
      },
      path.join(dir, 'learner.log'),
    );
    const deadline = Date.now() + 90_000;
    while (Date.now() < deadline) {
      if (learner.exitCode !== null || learner.signalCode !== null) throw new Error(`learner exited (${learner.exitCode ?? learner.signalCode})`);
      const res = await getJson<UpdateSummary[]>(port, '/updates?policy=solver').catch(() => undefined);
      if (res && res.status === 200 && res.body.length >= GROUPS / SETS_PER_UPDATE) {
        updates = res.body;
        return;
      }
      await sleep(500);
    }
    throw new Error('the learner did not apply 3 updates in 90 s');
  }, 150_000);

  afterAll(async () => {
    if (learner && learner.exitCode === null && learner.signalCode === null) {
      learner.kill('SIGTERM');
      await waitForExit(learner);
    }
  });

  it('serves POST /updates/:id/verify and GET /sets/:id/trace on the running learner', async () => {
    expect(updates.map((u) => u.versionAfter)).toEqual([1, 2, 3]);
    const verified = await getJson<{ ok: boolean; recomputedWeightsHashAfter: string; checks: { name: string; ok: boolean }[] }>(
      port,
      `/updates/${encodeURIComponent(updates[1].updateId)}/verify`,
      { method: 'POST' },
    );
    expect(verified.status).toBe(200);
    expect(verified.body.checks.map((c) => [c.name, c.ok])).toEqual([
      ['record', true],
      ['source-events', true],
      ['erased-content', true],
      ['checkpoint-before', true],
      ['backend', true],
      ['recompute', true],
    ]);
    expect(verified.body.ok).toBe(true);
    expect(verified.body.recomputedWeightsHashAfter).toBe(updates[1].weightsHashAfter);

    const trace = await getJson<{ groupId: string; advantage: number; update: { updateId: string }; groupSource: { offset: number } }[]>(
      port,
      `/sets/${encodeURIComponent('g3/s')}/trace`,
    );
    expect(trace.status).toBe(200);
    expect(trace.body).toHaveLength(1);
    expect(trace.body[0]).toMatchObject({ groupId: 'g3', advantage: -1, update: { updateId: updates[1].updateId }, groupSource: { offset: 3 } });
    expect((await getJson(port, '/sets/nope/trace')).status).toBe(404);
    expect((await getJson(port, '/updates/nope/verify', { method: 'POST' })).status).toBe(404);

    // The dashboard page: self-contained (no external assets), its script valid, wired to the endpoints above.
    const page = await fetch(`http://127.0.0.1:${port}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await page.text();
    expect(html.match(/(?:src|href)=["']?(?:https?:)?\/\//g)).toBeNull();
    expect(html.replace('http://www.w3.org/2000/svg', '')).not.toMatch(/https?:\/\//);
    const script = /<script>([\s\S]*)<\/script>/.exec(html)?.[1] ?? '';
    // eslint-disable-next-line @typescript-eslint/no-implied-eval -- compiles (never calls) the page's script: it must be valid JavaScript
    expect(() => new Function(script)).not.toThrow();
    expect(script).toContain("'/updates/' + encodeURIComponent(u.updateId) + '/verify'");

    learner?.kill('SIGTERM');
    if (learner) await waitForExit(learner);
  }, 120_000);

  it('audit show and trace print the record with its Kafka coordinates', async () => {
    const shown = await srpo(['audit', 'show', updates[0].updateId, '--json']);
    expect(shown.code).toBe(0);
    const record = JSON.parse(shown.stdout) as {
      groups: { groupId: string; source: { topic: string; offset: number } }[];
      hyperparameters: { objective: { objective: string } };
    };
    expect(record.groups.map((g) => [g.groupId, g.source.topic, g.source.offset])).toEqual([
      ['g0', catalog.advantageGroups.name, 0],
      ['g1', catalog.advantageGroups.name, 1],
    ]);
    expect(record.hyperparameters.objective.objective).toBe('srpo');
    const text = await srpo(['audit', 'show', updates[0].updateId]);
    expect(text.stdout).toContain(`group g0 (task-1/solve) at ${catalog.advantageGroups.name}:0@0`);
    expect(text.stdout).toMatch(/ratio\/mean\s+-?\d/);

    const trace = await srpo(['audit', 'trace', 'g4/s']);
    expect(trace.code).toBe(0);
    expect(trace.stdout).toContain(`group       g4 (task-1/solve) at ${catalog.advantageGroups.name}:0@4`);
    expect(trace.stdout).toContain(`update      ${updates[2].updateId} v2 -> v3`);
    const missing = await srpo(['audit', 'trace', 'no-such-set']);
    expect(missing.code).toBe(1);
    expect(missing.stderr.trim()).toBe('srpo: [NOT_FOUND] no recorded update consumed set no-such-set');
  }, 60_000);

  it('audit verify passes on a real update and fails clearly on a tampered source event', async () => {
    const ok = await srpo(['audit', 'verify', updates[2].updateId]);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain(`verified: ${updates[2].updateId} recomputes to ${updates[2].weightsHashAfter}`);

    // A mirrored copy of the log in which one record was rewritten: the recorded offsets now hold other content.
    const mirror = uniquePrefix('mirror');
    const mirrorCatalog = topicCatalog({ prefix: mirror, rawPartitions: 1, derivedPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [mirrorCatalog.advantageGroups]);
    await admin.disconnect();
    const originals = await readTopicsToEnd(kafka, [catalog.advantageGroups.name]);
    const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    await producer.send({
      topic: mirrorCatalog.advantageGroups.name,
      acks: -1,
      messages: originals.map((r) => {
        const g = toPlain(codec.decodeAs('AdvantageGroup', r.value));
        if (g.groupId === 'g3') g.sets[0].advantage = 5;
        return { key: r.key, value: codec.encode('AdvantageGroup', g), partition: 0 };
      }),
    });
    await producer.disconnect();

    const untouched = await srpo(['audit', 'verify', updates[0].updateId, '--source-prefix', mirror]);
    expect(untouched.code).toBe(0);
    const tampered = await srpo(['audit', 'verify', updates[1].updateId, '--source-prefix', mirror]);
    expect(tampered.code).toBe(1);
    expect(tampered.stderr.trim()).toBe(
      `srpo: [INTEGRITY_FAILED] verify ${updates[1].updateId} failed: source-events: group g3 at ${mirrorCatalog.advantageGroups.name}:0:3 was altered: set g3/s advantage 5, recorded -1`,
    );
    expect(tampered.stdout).toContain('FAIL source-events');
  }, 120_000);

  it('replays the run with a 100% hash match, and a counterfactual objective gives a different, complete run', async () => {
    const faithful = await srpo(['replay', '--run', 'same', '--policy', 'solver', '--json']);
    expect(faithful.code).toBe(0);
    const report = JSON.parse(faithful.stdout) as ReplayJson;
    expect(report.complete).toBe(true);
    expect(report.counterfactual).toBe(false);
    expect(report.rows.map((r) => [r.updateId, r.replayHash])).toEqual(updates.map((u) => [u.updateId, u.weightsHashAfter]));
    expect(report.matched).toBe(3);
    expect(report.firstDivergence).toBeUndefined();
    expect(faithful.stderr).toMatch(/replay same: 3\/3 updates, 6 events, [\d.]+ events\/s, ETA 0\.0 s/);
    // The run's own derived topics got its versions; the source topics were only read.
    const versions = (await readTopicsToEnd(kafka, [`${prefix}replay.same.policy-versions`])).map((r) => codec.decodeAs('PolicyVersion', r.value));
    expect(versions.map((v) => [v.version, v.weightsHash])).toEqual(updates.map((u) => [u.versionAfter, u.weightsHashAfter]));
    expect(await readTopicsToEnd(kafka, [catalog.policyVersions.name])).toHaveLength(3);

    const counterfactual = await srpo(['replay', '--run', 'gspo', '--policy', 'solver', '--objective', 'gspo', '--json']);
    expect(counterfactual.code).toBe(0);
    const cf = JSON.parse(counterfactual.stdout) as ReplayJson;
    expect(cf.complete).toBe(true);
    expect(cf.counterfactual).toBe(true);
    expect(cf.rows).toHaveLength(3);
    for (const r of cf.rows) {
      expect(r.replayHash).toMatch(/^[0-9a-f]{64}$/);
      expect(r.match).toBe(false);
      expect(r.cause).toBe('different config');
    }

    const compared = await srpo(['runs', 'compare', 'same', 'gspo', '--json']);
    expect(compared.code).toBe(0);
    const rows = (JSON.parse(compared.stdout) as { rows: { version: number; a: { hash: string; loss: number }; b: { hash: string; loss: number } }[] }).rows;
    expect(rows.map((r) => r.version)).toEqual([1, 2, 3]);
    for (const r of rows) expect(r.a.hash).not.toBe(r.b.hash);
    expect(rows[0].a.hash).toBe(updates[0].weightsHashAfter);
    // Starting from committed offsets: the run begins at the first update read entirely at or after offset 2.
    const offsets = path.join(dir, 'offsets.json');
    fs.writeFileSync(offsets, JSON.stringify({ [catalog.advantageGroups.name]: { '0': 2 } }));
    const partial = await srpo(['replay', '--run', 'tail', '--from-offsets', offsets, '--json']);
    expect(partial.code).toBe(0);
    const tail = JSON.parse(partial.stdout) as ReplayJson;
    expect(tail.rows.map((r) => [r.updateId, r.replayHash, r.match])).toEqual(updates.slice(1).map((u) => [u.updateId, u.weightsHashAfter, true]));

    const vsSource = await srpo(['runs', 'compare', 'source', 'same']);
    expect(vsSource.code).toBe(0);
    expect(
      vsSource.stdout
        .trim()
        .split('\n')
        .slice(2)
        .map((l) => l.split(/\s+/).pop()),
    ).toEqual(['yes', 'yes', 'yes']);

    const again = await srpo(['replay', '--run', 'same', '--policy', 'solver']);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^srpo: \[CONFLICT\] run same already exists/);
  }, 240_000);

  it('audit verify fails clearly when the checkpoint it starts from is altered', async () => {
    const before = updates[1].versionBefore;
    const weights = path.join(dir, 'checkpoints', 'solver', `v${before}`, 'weights.bin');
    const bytes = fs.readFileSync(weights);
    bytes[bytes.length >> 1] ^= 0x01;
    fs.writeFileSync(weights, bytes);
    const res = await srpo(['audit', 'verify', updates[1].updateId]);
    expect(res.code).toBe(1);
    expect(res.stderr.split('\n').filter(Boolean)).toHaveLength(1);
    expect(res.stderr).toMatch(
      new RegExp(
        `^srpo: \\[INTEGRITY_FAILED\\] verify ${updates[1].updateId.replace(/\./g, '\\.')} failed: checkpoint-before: cannot load version 1 from .*weights\\.bin SHA-256 [0-9a-f]{64} does not match`,
      ),
    );
  }, 60_000);
});
