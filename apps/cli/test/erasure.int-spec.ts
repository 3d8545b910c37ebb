import type { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Partitioners } from 'kafkajs';
import { Logger } from '@srpo/core';
import { AdvantageGroup, createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, type ContentKey } from '@srpo/events';
import { AuditStore, KeyStore } from '@srpo/store';
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

Logger.configure({ level: 'warn' });

const SUBJECTS = ['alice', 'bob', 'carol'];
const T0 = 1_767_225_600_000;

interface ImpactJson {
  impact: {
    keyIds: string[];
    sets: { setId: string; updateId: string }[];
    updates: { updateId: string; versionBefore: number; versionAfter: number }[];
    versions: { version: number; direct: boolean }[];
    cleanBefore: { policyId: string; version: number }[];
  };
  erasure: { erasure: { erasureId: string; keyIds: string[] }; scrub: string } | null;
}

/**
 * Crypto-shredding end to end (docs/erasure.md), against the real broker and the learner process:
 * three subjects' sealed content trained on, one subject erased in the middle of training.
 */
describe('srpo erase: three subjects, one erased mid-run (real broker, learner process)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'erasure-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('erase');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = tempDir('erase');
  const sqlite = path.join(dir, 'learner.sqlite');
  const port = 22_000 + Math.floor(Math.random() * 1000);
  /** set id → the subject whose content it holds (the test's own bookkeeping, independent of the store). */
  const subjectOfSet = new Map<string, string>();
  let keys: KeyStore;
  /** set id → the hex of the key its member is sealed under. */
  const keyOfSet = new Map<string, string>();
  let learner: ChildProcess | undefined;
  /** Set by the erasure: its id and the rebuilt lineage's head. */
  let erasureId = '';
  let rebuiltHead = { version: 0, weightsHash: '' };

  const env = (): NodeJS.ProcessEnv => ({
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_SQLITE_PATH: sqlite,
    SRPO_REPLAY_DIR: path.join(dir, 'replays'),
    SRPO_BACKEND: 'tensorflow',
    SRPO_LOG_LEVEL: 'info',
  });
  const srpo = (args: string[]) => runSrpo(args, env());

  /** Group `g<i>`: two single-member sets, of subjects i mod 3 and i+1 mod 3, each sealed under its (subject, episode) key. */
  async function group(i: number): Promise<AdvantageGroup> {
    const sets = [];
    for (const j of [0, 1]) {
      const subject = SUBJECTS[(i + j) % 3];
      const setId = `g${i}/s${j}`;
      const outputId = `g${i}/o${j}`;
      const key: ContentKey = await keys.keyFor(subject, `ep-${outputId}`, T0);
      keyOfSet.set(setId, key.key.toString('hex'));
      const m = member({ outputId, response: [4 + j, 5, 6], logpOld: [-2.5, -2.75, -3], version: 0, subjectId: subject, seal: key });
      subjectOfSet.set(setId, subject);
      sets.push({
        set: { ...activeSet(setId, [m]), episodeId: `ep-${outputId}`, reward: j === 0 ? 1 : 0, subjectIds: [subject] },
        advantage: j === 0 ? 1 : -1,
      });
    }
    return advantageGroup(`g${i}`, sets);
  }

  async function produce(groups: AdvantageGroup[]): Promise<void> {
    const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    await producer.send({
      topic: catalog.advantageGroups.name,
      acks: -1,
      messages: groups.map((g) => ({ key: g.policyId, value: codec.encode('AdvantageGroup', g) })),
    });
    await producer.disconnect();
  }

  async function updatesApplied(n: number): Promise<{ updateId: string; versionAfter: number }[]> {
    const deadline = Date.now() + 90_000;
    while (Date.now() < deadline) {
      if (learner && (learner.exitCode !== null || learner.signalCode !== null)) throw new Error(`learner exited (${learner.exitCode ?? learner.signalCode})`);
      const res = await fetch(`http://127.0.0.1:${port}/updates?policy=solver`).catch(() => undefined);
      if (res?.status === 200) {
        const body = (await res.json()) as { updateId: string; versionAfter: number }[];
        if (body.length >= n) return body;
      }
      await sleep(300);
    }
    throw new Error(`the learner did not apply ${n} updates in 90 s`);
  }

  /** From the audit store itself: the updates whose ledger rows cite a set of `subject`, by the test's own set → subject map. */
  async function updatesCiting(subject: string): Promise<string[]> {
    const store = await AuditStore.open({ kind: 'sqlite', path: sqlite });
    try {
      const out: string[] = [];
      for (const v of await store.listVersions('solver')) {
        if (v.updateId === null) continue;
        const u = await store.getUpdate(v.updateId);
        if (u.groups.some((g) => g.setIds.some((s) => subjectOfSet.get(s) === subject))) out.push(u.updateId);
      }
      return out;
    } finally {
      await store.close();
    }
  }

  /** Every set id cited by the ledger of the store at `file`, in version order. */
  async function ledgerSets(file: string): Promise<string[]> {
    const store = await AuditStore.open({ kind: 'sqlite', path: file });
    try {
      const cited: string[] = [];
      for (const v of await store.listVersions('solver')) {
        if (v.updateId !== null) for (const g of (await store.getUpdate(v.updateId)).groups) cited.push(...g.setIds);
      }
      return cited;
    } finally {
      await store.close();
    }
  }

  beforeAll(async () => {
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    keys = await KeyStore.open({ kind: 'sqlite', path: sqlite });
    await produce(await Promise.all([0, 1, 2].map((i) => group(i))));
    learner = startLearner('learner.log');
    await updatesApplied(3);
  }, 150_000);

  function startLearner(logFile: string): ChildProcess {
    return spawnApp(
      'learner',
      {
        ...(env() as Record<string, string>),
        SRPO_POLICY_ID: 'solver',
        SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
        SRPO_SETS_PER_UPDATE: '2',
        SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
        SRPO_SEED: String(SEED),
        SRPO_MAX_POLICY_LAG: '100',
        SRPO_SESSION_TIMEOUT_MS: '6000',
        SRPO_CONSUMER_GROUP: `${prefix}learner`,
        SRPO_HTTP_PORT: String(port),
      },
      path.join(dir, logFile),
    );
  }

  afterAll(async () => {
    if (learner && learner.exitCode === null && learner.signalCode === null) {
      learner.kill('SIGTERM');
      await waitForExit(learner);
    }
    await keys?.close();
  });

  it('reports exactly the updates that cite the subject, erases its keys, and the learner leaves its sets out afterwards', async () => {
    const citing = await updatesCiting('bob');
    expect(citing).toHaveLength(2); // g0 = alice+bob, g1 = bob+carol, g2 = carol+alice
    const dry = await srpo(['erase', '--subject', 'bob', '--dry-run', '--json']);
    expect(dry.code).toBe(0);
    const report = JSON.parse(dry.stdout) as ImpactJson;
    expect(report.erasure).toBeNull();
    expect(report.impact.updates.map((u) => u.updateId)).toEqual(citing);
    expect(report.impact.sets.map((s) => s.setId).sort()).toEqual(['g0/s1', 'g1/s0']);
    expect(report.impact.keyIds).toHaveLength(2);
    // Every version from the first that trained on bob's data: v1 directly, v2 directly, v3 through v2.
    expect(report.impact.versions.map((v) => [v.version, v.direct])).toEqual([
      [1, true],
      [2, true],
      [3, false],
    ]);
    expect(report.impact.cleanBefore).toEqual([{ policyId: 'solver', version: 0 }]);

    // Sealed before the erasure (bob's sets under keys it deletes), sent after it:
    // g3 = alice+bob, g4 = bob+carol, g5 = carol+alice.
    const later = await Promise.all([3, 4, 5].map((i) => group(i)));
    const certificate = path.join(dir, 'erasure-bob.json');
    const erased = await srpo(['erase', '--subject', 'bob', '--rebuild', '--policy', 'solver', '--certificate', certificate, '--json']);
    expect({ code: erased.code, stderr: erased.code === 0 ? '' : erased.stderr }).toEqual({ code: 0, stderr: '' });
    const done = JSON.parse(erased.stdout) as ImpactJson & {
      rebuilt: { fromVersion: number; head: { version: number }; verified: number; citesErased: string[]; run: string };
    };
    // The lineage rebuilt from v0 without bob's sets: v1-v3 again, each verified from its own record, none citing bob.
    expect(done.rebuilt).toMatchObject({ fromVersion: 0, head: { version: 3 }, verified: 3, citesErased: [] });
    erasureId = done.erasure?.erasure.erasureId ?? '';
    rebuiltHead = (done.rebuilt as unknown as { head: { version: number; weightsHash: string } }).head;
    for (const hex of keyOfSet.values()) expect(erased.stdout + erased.stderr + dry.stdout + dry.stderr).not.toContain(hex);
    const rebuiltSets = await ledgerSets(path.join(dir, 'replays', done.rebuilt.run, 'store.sqlite'));
    expect(rebuiltSets).toEqual(['g0/s0', 'g1/s1', 'g2/s0', 'g2/s1']);
    // The certificate checks against the store's key and against the key an auditor pinned; a changed one does not.
    expect((await srpo(['erase', '--check-certificate', certificate])).code).toBe(0);
    const pinned = path.join(dir, 'store-key.pem');
    fs.writeFileSync(pinned, (await srpo(['erase', '--print-public-key'])).stdout);
    expect((await srpo(['erase', '--check-certificate', certificate, '--public-key', pinned])).code).toBe(0);
    const cert = JSON.parse(fs.readFileSync(certificate, 'utf8')) as { affected: { updates: string[] }; rebuilt: { head: { version: number } } };
    expect(cert.affected.updates).toEqual(citing);
    expect(cert.rebuilt.head.version).toBe(3);
    fs.writeFileSync(path.join(dir, 'changed.json'), JSON.stringify({ ...cert, affected: { ...cert.affected, updates: [] } }));
    const changed = await srpo(['erase', '--check-certificate', path.join(dir, 'changed.json')]);
    expect(changed.code).toBe(1);
    expect(changed.stderr).toMatch(/does not check: the signature does not match the statement/);
    // The two keys the dry run saw, and the two of bob's episodes sealed since (g3, g4).
    expect(done.erasure?.erasure.keyIds.sort()).toEqual([...done.impact.keyIds].sort());
    expect(done.impact.keyIds).toHaveLength(4);
    expect(done.impact.keyIds).toEqual(expect.arrayContaining(report.impact.keyIds));
    expect(done.erasure?.scrub).toMatch(/^wal-(truncated|busy)$/);
    // Announced to the materializers: the erasure on the erasures topic, with its key ids (never keys).
    const announced = (await readTopicsToEnd(kafka, [catalog.erasures.name])).map((r) => codec.decodeAs('Erasure', r.value));
    expect(announced.map((e) => [e.erasureId, e.scope, e.target, [...e.keyIds].sort()])).toEqual([
      [done.erasure?.erasure.erasureId, 'subject', 'bob', [...done.impact.keyIds].sort()],
    ]);

    await produce(later);
    const all = await updatesApplied(6);
    const store = await AuditStore.open({ kind: 'sqlite', path: sqlite });
    try {
      for (const u of all.slice(3)) {
        const detail = await store.getUpdate(u.updateId);
        for (const g of detail.groups) expect(g.setIds.filter((s) => subjectOfSet.get(s) === 'bob')).toEqual([]);
      }
    } finally {
      await store.close();
    }
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/^learner_sets_erased_total 2$/m);
  }, 240_000);

  it('audit verify says which updates cite erased content and verifies every other, the reduced groups included', async () => {
    const all = await updatesApplied(6);
    const citing = new Set(await updatesCiting('bob'));
    for (const u of all) {
      const v = await srpo(['audit', 'verify', u.updateId, '--json']);
      const report = JSON.parse(v.stdout) as { ok: boolean; failure?: string; erasedSetIds?: string[] };
      if (citing.has(u.updateId)) {
        expect(v.code).toBe(1);
        expect(report.failure).toMatch(/^erased-content: 1 set\(s\) of this update hold content erased since/);
        expect(report.erasedSetIds).toHaveLength(1);
      } else {
        expect({ updateId: u.updateId, ok: report.ok, failure: report.failure }).toEqual({ updateId: u.updateId, ok: true, failure: undefined });
      }
    }
  }, 240_000);

  it('replays the run without the erased sets: it says where, and its ledger cites none of them', async () => {
    const all = await updatesApplied(6);
    const replay = await srpo(['replay', '--run', 'without-bob', '--policy', 'solver', '--json']);
    expect({ code: replay.code, stderr: replay.code === 0 ? '' : replay.stderr }).toEqual({ code: 0, stderr: '' });
    const report = JSON.parse(replay.stdout) as { complete: boolean; rows: { updateId: string; match: boolean; cause?: string }[] };
    expect(report.complete).toBe(true);
    // v1 and v2 trained on bob's sets: left out there; v3 (carol, alice) starts from other weights; v4-v6 already trained without them.
    expect(report.rows.map((r) => [r.updateId, r.match, r.cause])).toEqual([
      [all[0].updateId, false, 'erased content'],
      [all[1].updateId, false, 'erased content'],
      ...all.slice(2).map((u) => [u.updateId, false, 'inherited']),
    ]);
    // Adopting the rebuilt lineage is refused while the learner runs: it would go on from the weights it holds.
    const refused = await srpo(['erase', '--adopt', erasureId, '--policy', 'solver', '--learner-group', `${prefix}learner`, '--wait-ms', '0']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/consumer group .*learner has 1 member\(s\): stop the learner of solver first/);
    const cited = await ledgerSets(path.join(dir, 'replays', 'without-bob', 'store.sqlite'));
    expect(cited.filter((s) => subjectOfSet.get(s) === 'bob')).toEqual([]);
    expect(cited).toEqual(['g0/s0', 'g1/s1', 'g2/s0', 'g2/s1', 'g3/s0', 'g4/s1', 'g5/s0', 'g5/s1']);
  }, 240_000);

  it('never writes a key to a log, and no deleted key is left in the store files', async () => {
    learner?.kill('SIGTERM');
    if (learner) await waitForExit(learner);
    const log = fs.readFileSync(path.join(dir, 'learner.log'), 'utf8');
    expect(log).toContain('sets of erased content left out');
    for (const hex of keyOfSet.values()) expect(log).not.toContain(hex);
    const remaining = new Set((await keys.keysById(await keys.keyIdsOf({ subjectId: 'alice' }))).keys());
    expect(remaining.size).toBeGreaterThan(0);
    await keys.close();
    const files = fs.readdirSync(dir).filter((f) => f.startsWith('learner.sqlite'));
    const bytes = Buffer.concat(files.map((f) => fs.readFileSync(path.join(dir, f))));
    const keysOf = (subject: string): string[] => [...keyOfSet].filter(([setId]) => subjectOfSet.get(setId) === subject).map(([, hex]) => hex);
    const bobKeys = keysOf('bob');
    expect(bobKeys).toHaveLength(4);
    for (const hex of bobKeys) expect(bytes.includes(Buffer.from(hex, 'ascii'))).toBe(false);
    // The scan can fail: keys still in use are in the files.
    expect(keysOf('alice').some((hex) => bytes.includes(Buffer.from(hex, 'ascii')))).toBe(true);
  }, 60_000);

  it('adopts the rebuilt lineage as v7: verified, announced, outside the report of what bob reached, and the learner trains on from it', async () => {
    const adopt = await runSrpo(['erase', '--adopt', erasureId, '--policy', 'solver', '--learner-group', `${prefix}learner`], {
      ...env(),
      SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
    });
    expect({ code: adopt.code, stderr: adopt.code === 0 ? '' : adopt.stderr }).toEqual({ code: 0, stderr: '' });
    const store = await AuditStore.open({ kind: 'sqlite', path: sqlite });
    let adoptId: string;
    try {
      const v7 = await store.getVersion('solver', 7);
      expect(v7?.weightsHash).toBe(rebuiltHead.weightsHash);
      adoptId = v7?.updateId ?? '';
    } finally {
      await store.close();
    }
    // On policy-versions, where the publisher and the agents take it up like any version.
    const announced = (await readTopicsToEnd(kafka, [catalog.policyVersions.name])).map((r) => codec.decodeAs('PolicyVersion', r.value));
    expect(announced.filter((v) => v.version === 7).map((v) => [v.weightsHash, v.updateId])).toEqual([[rebuiltHead.weightsHash, adoptId]]);
    const verify = await srpo(['audit', 'verify', adoptId, '--json']);
    const report = JSON.parse(verify.stdout) as { ok: boolean; checks: { name: string; ok: boolean }[] };
    expect([verify.code, report.ok, report.checks.map((c) => [c.name, c.ok])]).toEqual([
      0,
      true,
      [
        ['record', true],
        ['adoption', true],
        ['recompute', true],
      ],
    ]);
    // Bob's data reached v1-v6; v7 descends from the rebuilt lineage, which never saw it.
    const dry = JSON.parse((await srpo(['erase', '--subject', 'bob', '--dry-run', '--json'])).stdout) as ImpactJson;
    expect(dry.impact.versions.map((v) => v.version)).toEqual([1, 2, 3, 4, 5, 6]);
    // The learner, started again, restores v7 and its next update starts from the adopted weights.
    learner = startLearner('learner-adopted.log');
    keys = await KeyStore.open({ kind: 'sqlite', path: sqlite });
    await produce([await group(8)]); // carol and alice
    const after = await updatesApplied(8);
    const store2 = await AuditStore.open({ kind: 'sqlite', path: sqlite });
    try {
      const u8 = await store2.getUpdate(after.find((u) => u.versionAfter === 8)?.updateId ?? '');
      expect([u8.versionBefore, u8.weightsHashBefore]).toEqual([7, rebuiltHead.weightsHash]);
    } finally {
      await store2.close();
    }
    learner.kill('SIGTERM');
    await waitForExit(learner);
  }, 150_000);
});
