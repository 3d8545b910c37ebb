import { execFile } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { promisify } from 'util';
import { Partitioners } from 'kafkajs';
import { AdvantageGroup, createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, toPlain } from '@srpo/events';
import {
  activeSet,
  advantageGroup,
  ensureKafka,
  member,
  produceGroups,
  SEED,
  sleep,
  spawnApp,
  tempDir,
  TINY_MODEL_JSON,
  uniquePrefix,
  waitForExit,
} from '@srpo/testing';

const run = promisify(execFile);
const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'srpo.js');

/** One single-set group per update: update k (v(k-1) -> vk) trains on group g(k-1), at offset k-1. */
const GROUPS = 7;

interface UpdateSummary {
  updateId: string;
  versionBefore: number;
  versionAfter: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
}

interface VerifyJson {
  ok: boolean;
  checks: { name: string; ok: boolean; detail: string }[];
  recomputedWeightsHashAfter?: string;
  startingCheckpoint?: { version: number; fromVersion: number; fromDir: string; reapplied: number };
  failure?: string;
}

function groups(): AdvantageGroup[] {
  return Array.from({ length: GROUPS }, (_, i) => {
    const m = member({ outputId: `g${i}/o`, response: [4 + (i % 3), 5, 6], logpOld: [-2.5, -2.75, -3], version: 0 });
    return advantageGroup(`g${i}`, [{ set: activeSet(`g${i}/s`, [m]), advantage: i % 2 === 0 ? 1 : -1 }]);
  });
}

/** The CLI's own stderr lines; native TensorFlow prints its start-up notices there too. */
function ours(stderr: string): string {
  return stderr
    .split('\n')
    .filter((l) => !/^(WARNING: All log messages before absl|I0000 |W0000 )/.test(l))
    .join('\n');
}

describe('checkpoint retention on a real learner run (real broker, real processes)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'retention-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('retention');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = tempDir('retention');
  const sqlite = path.join(dir, 'learner.sqlite');
  const checkpoints = path.join(dir, 'checkpoints');
  // Below Linux's ephemeral range (32768-60999): a port there can be taken by any outgoing socket.
  const port = 24_000 + Math.floor(Math.random() * 1000);
  let updates: UpdateSummary[] = [];
  let learnerLog = '';

  async function srpo(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_SQLITE_PATH: sqlite,
      SRPO_REPLAY_DIR: path.join(dir, 'replays'),
      SRPO_BACKEND: 'tensorflow',
      SRPO_LOG_LEVEL: 'error',
    };
    try {
      const { stdout, stderr } = await run('node', [bin, ...args], { env, timeout: 120_000 });
      return { code: 0, stdout, stderr: ours(stderr) };
    } catch (e) {
      const err = e as { code: number; stdout: string; stderr: string };
      return { code: err.code, stdout: err.stdout, stderr: ours(err.stderr) };
    }
  }

  const byVersionAfter = (v: number): UpdateSummary => {
    const u = updates.find((x) => x.versionAfter === v);
    if (!u) throw new Error(`no update produced v${v}`);
    return u;
  };

  beforeAll(async () => {
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    await produceGroups(kafka, catalog.advantageGroups.name, groups());
    const logFile = path.join(dir, 'learner.log');
    const learner = spawnApp(
      'learner',
      {
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_POLICY_ID: 'solver',
        SRPO_SQLITE_PATH: sqlite,
        SRPO_CHECKPOINT_DIR: checkpoints,
        SRPO_CHECKPOINT_KEEP_LAST: '2',
        SRPO_CHECKPOINT_KEEP_EVERY: '4',
        SRPO_SETS_PER_UPDATE: '1',
        SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
        SRPO_SEED: String(SEED),
        SRPO_MAX_POLICY_LAG: '100',
        SRPO_SESSION_TIMEOUT_MS: '6000',
        SRPO_CONSUMER_GROUP: `${prefix}learner`,
        SRPO_HTTP_PORT: String(port),
        SRPO_BACKEND: 'tensorflow',
        SRPO_LOG_LEVEL: 'debug',
      },
      logFile,
    );
    try {
      const deadline = Date.now() + 120_000;
      while (updates.length < GROUPS) {
        if (Date.now() > deadline) throw new Error(`the learner applied ${updates.length} of ${GROUPS} updates in 120 s`);
        if (learner.exitCode !== null || learner.signalCode !== null) throw new Error(`learner exited (${learner.exitCode ?? learner.signalCode})`);
        const res = await fetch(`http://127.0.0.1:${port}/updates?policy=solver`).catch(() => undefined);
        if (res?.ok) updates = (await res.json()) as UpdateSummary[];
        await sleep(500);
      }
    } finally {
      learner.kill('SIGTERM');
      await waitForExit(learner);
    }
    learnerLog = fs.readFileSync(logFile, 'utf8');
  }, 180_000);

  it('keeps version 0, the anchors and the newest versions, and says so at debug level', () => {
    expect(updates.map((u) => u.versionAfter).sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    // v7 committed, keep last 2 (v6, v7), every 4 (v4), and v0: v1, v2, v3 and v5 are gone.
    const left = fs.readdirSync(path.join(checkpoints, 'solver')).sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
    expect(left).toEqual(['v0', 'v4', 'v6', 'v7']);
    expect(learnerLog).toMatch(/"msg":"checkpoints pruned"/);
  });

  it('verifies an update whose starting checkpoint was pruned by rebuilding it from the nearest anchor', async () => {
    // v5 was pruned: rebuilt from v4 with one update re-applied.
    const u6 = byVersionAfter(6);
    const res = await srpo(['audit', 'verify', u6.updateId, '--json']);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const report = JSON.parse(res.stdout) as VerifyJson;
    expect(report.ok).toBe(true);
    expect(report.checks.map((c) => [c.name, c.ok])).toEqual([
      ['record', true],
      ['source-events', true],
      ['erased-content', true],
      ['checkpoint-before', true],
      ['backend', true],
      ['recompute', true],
    ]);
    expect(report.startingCheckpoint).toEqual({
      version: 5,
      weightsHash: u6.weightsHashBefore,
      fromVersion: 4,
      fromDir: path.join(checkpoints, 'solver', 'v4'),
      reapplied: 1,
    });
    expect(report.recomputedWeightsHashAfter).toBe(u6.weightsHashAfter);

    // v3 was pruned and v0 is the nearest kept checkpoint below it: three updates re-applied, named in the text output.
    const u4 = byVersionAfter(4);
    const text = await srpo(['audit', 'verify', u4.updateId]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(
      /ok {3}checkpoint-before {2}version 3 \([0-9a-f]{64}\) was pruned: rebuilt from checkpoint v0 \(.*v0\) by re-applying 3 recorded update\(s\)/,
    );
    expect(text.stdout).toContain(`verified: ${u4.updateId} recomputes to ${u4.weightsHashAfter}`);

    // With an explicit checkpoint root, and where the checkpoint is still on disk: nothing re-applied.
    const u7 = byVersionAfter(7);
    const direct = await srpo(['audit', 'verify', u7.updateId, '--json', '--checkpoint-dir', checkpoints]);
    expect(direct.code).toBe(0);
    expect((JSON.parse(direct.stdout) as VerifyJson).startingCheckpoint).toMatchObject({ version: 6, fromVersion: 6, reapplied: 0 });
  }, 180_000);

  it('fails verify, naming the version and cause, when a group of an update re-applied during the rebuild was altered', async () => {
    const mirror = uniquePrefix('retention-mirror');
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
        if (g.groupId === 'g1') g.sets[0].advantage = 5;
        return { key: r.key, value: codec.encode('AdvantageGroup', g), partition: 0 };
      }),
    });
    await producer.disconnect();

    // Update v3 -> v4 trains on g3 (untouched), but rebuilding v3 from v0 re-applies v1 -> v2, which trained on g1.
    const u4 = byVersionAfter(4);
    const u2 = byVersionAfter(2);
    const res = await srpo(['audit', 'verify', u4.updateId, '--source-prefix', mirror]);
    expect(res.code).toBe(1);
    expect(res.stdout).toContain('ok   source-events');
    expect(res.stdout).toContain('FAIL checkpoint-before');
    expect(res.stderr.trim()).toBe(
      `srpo: [INTEGRITY_FAILED] verify ${u4.updateId} failed: checkpoint-before: version 3 is not on disk (${path.join(checkpoints, 'solver', 'v3')}, pruned?) ` +
        `and rebuilding it failed: from v0, update ${u2.updateId} (v1 -> v2): group g1 at ${mirrorCatalog.advantageGroups.name}:0:1 was altered: set g1/s advantage 5, recorded -1`,
    );
    // The same update verifies against the original log, so the failure is the altered group's alone.
    expect((await srpo(['audit', 'verify', u4.updateId])).code).toBe(0);
  }, 180_000);

  it('replays from a pruned starting version, rebuilt from its anchor, with every hash matching', async () => {
    // The first update read entirely at or after offset 5 is v5 -> v6 (group g5), whose v5 was pruned.
    const offsets = path.join(dir, 'offsets.json');
    fs.writeFileSync(offsets, JSON.stringify({ [catalog.advantageGroups.name]: { '0': 5 } }));
    const res = await srpo(['replay', '--run', 'tail', '--from-offsets', offsets, '--json']);
    expect(res.code).toBe(0);
    const report = JSON.parse(res.stdout) as {
      matched: number;
      rows: { updateId: string; replayHash: string | null; match: boolean }[];
      startingCheckpoint: { version: number; fromVersion: number; reapplied: number };
    };
    expect(report.startingCheckpoint).toMatchObject({ version: 5, fromVersion: 4, reapplied: 1 });
    expect(report.rows.map((r) => [r.updateId, r.replayHash, r.match])).toEqual(
      [6, 7].map((v) => [byVersionAfter(v).updateId, byVersionAfter(v).weightsHashAfter, true]),
    );
    expect(report.matched).toBe(2);
  }, 180_000);
});
