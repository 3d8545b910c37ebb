import { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
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

interface UpdateSummary {
  updateId: string;
  versionBefore: number;
  versionAfter: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
}

interface UpdateDetailBody extends UpdateSummary {
  groups: { groupId: string; source: { topic: string; partition: number; offset: number }; sources: unknown[] }[];
  diagnostics: Record<string, number>;
}

const GROUPS = 6;
const SETS_PER_UPDATE = 2;

/** Six one-set groups whose behaviour log-probs are plausible made-up values; advantages alternate in sign. */
function groups(): AdvantageGroup[] {
  return Array.from({ length: GROUPS }, (_, i) => {
    const m = member({ outputId: `g${i}/o`, response: [4 + (i % 3), 5, 6], logpOld: [-2.5, -2.75, -3], version: 0 });
    return advantageGroup(`g${i}`, [{ set: activeSet(`g${i}/s`, [m]), advantage: i % 2 === 0 ? 1 : -1 }]);
  });
}

async function getJson<T>(port: number, url: string): Promise<T> {
  const res = await fetch(`http://127.0.0.1:${port}${url}`);
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  return (await res.json()) as T;
}

async function waitForUpdates(port: number, count: number, child: ChildProcess, timeoutMs = 90_000): Promise<UpdateSummary[]> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`learner exited (${child.exitCode ?? child.signalCode})`);
    const updates = await getJson<UpdateSummary[]>(port, '/updates?policy=solver').catch(() => undefined);
    if (updates && updates.length >= count) return updates;
    await sleep(500);
  }
  throw new Error(`fewer than ${count} updates after ${timeoutMs} ms`);
}

// Below Linux's ephemeral range (32768-60999): a port there can be taken by any outgoing socket.
let nextPort = 23_000 + Math.floor(Math.random() * 1000);

describe('learner on the real broker (real processes)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'learner-test' });

  async function scenario(label: string) {
    const prefix = uniquePrefix(label);
    const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    await produceGroups(kafka, catalog.advantageGroups.name, groups());
    const dir = tempDir(label);
    const port = nextPort++;
    const env = (extra: Record<string, string> = {}) => ({
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_POLICY_ID: 'solver',
      // A group of its own: another run of this test on the same broker must not share partitions.
      SRPO_CONSUMER_GROUP: `${prefix}learner`,
      SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'),
      SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
      SRPO_SETS_PER_UPDATE: String(SETS_PER_UPDATE),
      SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
      SRPO_SEED: String(SEED),
      SRPO_MAX_POLICY_LAG: '100',
      SRPO_SESSION_TIMEOUT_MS: '6000',
      SRPO_HTTP_PORT: String(port),
      SRPO_BACKEND: 'tensorflow',
      SRPO_LOG_LEVEL: 'info',
      ...extra,
    });
    const log = path.join(dir, 'learner.log');
    return { catalog, port, env, log, dir, groupId: `${prefix}learner` };
  }

  async function finish(s: Awaited<ReturnType<typeof scenario>>, child: ChildProcess) {
    const updates = await waitForUpdates(s.port, GROUPS / SETS_PER_UPDATE, child);
    const details = await Promise.all(updates.map((u) => getJson<UpdateDetailBody>(s.port, `/updates/${u.updateId}`)));
    child.kill('SIGTERM');
    await waitForExit(child);
    // Nest closes the app on SIGTERM, then re-raises the signal: a clean stop ends by SIGTERM.
    expect(child.signalCode === 'SIGTERM' || child.exitCode === 0).toBe(true);
    expect(fs.readFileSync(s.log, 'utf8')).toMatch(/"msg":"learner stopping"/);
    return { updates, details };
  }

  let baselineHash: string | undefined;

  it('applies updates from ready groups, records complete audit rows, publishes versions and commits offsets', async () => {
    const s = await scenario('learner');
    const child = spawnApp('learner', s.env(), s.log);
    const { updates, details } = await finish(s, child);
    expect(updates.map((u) => [u.versionBefore, u.versionAfter])).toEqual([
      [0, 1],
      [1, 2],
      [2, 3],
    ]);
    for (let i = 1; i < updates.length; i++) expect(updates[i].weightsHashBefore).toBe(updates[i - 1].weightsHashAfter);
    for (const u of updates) expect(u.weightsHashAfter).not.toBe(u.weightsHashBefore);
    // Every group is in the ledger once, in log order, with its Kafka coordinates.
    const ledger = details.flatMap((d) => d.groups);
    expect(ledger.map((g) => g.groupId)).toEqual(['g0', 'g1', 'g2', 'g3', 'g4', 'g5']);
    expect(ledger.map((g) => g.source.offset)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const g of ledger) {
      expect(g.source.topic).toBe(s.catalog.advantageGroups.name);
      expect(g.sources).toHaveLength(1);
    }
    for (const d of details) expect(Number.isFinite(d.diagnostics['ratio/mean'])).toBe(true);

    const codec = new EventCodec();
    const versions = (await readTopicsToEnd(kafka, [s.catalog.policyVersions.name])).map((r) => toPlain(codec.decodeAs('PolicyVersion', r.value)));
    expect(versions.map((v) => v.version)).toEqual(expect.arrayContaining([1, 2, 3]));
    expect(versions.find((v) => v.version === 3)?.weightsHash).toBe(updates[2].weightsHashAfter);
    const published = (await readTopicsToEnd(kafka, [s.catalog.policyUpdates.name])).map((r) => codec.decodeAs('PolicyUpdate', r.value).updateId);
    expect(new Set(published)).toEqual(new Set(updates.map((u) => u.updateId)));

    const admin = kafka.admin();
    await admin.connect();
    const committed = await admin.fetchOffsets({ groupId: s.groupId, topics: [s.catalog.advantageGroups.name] });
    await admin.disconnect();
    expect(committed[0].partitions.map((p) => Number(p.offset))).toEqual([GROUPS]);
    baselineHash = updates[2].weightsHashAfter;
  }, 180_000);

  it.each(['after-step', 'after-checkpoint', 'after-db', 'after-publish'])(
    'killed %s, restarted: no group lost or applied twice, same final weights as the uninterrupted run',
    async (point) => {
      expect(baselineHash).toBeDefined();
      const s = await scenario(`crash-${point}`);
      // The tightest retention (only v0 and the committed version stay): pruning must never take what a restart loads.
      const retention = { SRPO_CHECKPOINT_KEEP_LAST: '1', SRPO_CHECKPOINT_KEEP_EVERY: '0' };
      const crashing = spawnApp('learner', s.env({ ...retention, SRPO_CRASH_AT: point }), s.log);
      await waitForExit(crashing);
      expect(crashing.signalCode).toBe('SIGKILL');
      const child = spawnApp('learner', s.env(retention), s.log);
      const { updates, details } = await finish(s, child);
      expect(updates).toHaveLength(3);
      const ledger = details.flatMap((d) => d.groups.map((g) => g.groupId));
      expect(ledger).toEqual(['g0', 'g1', 'g2', 'g3', 'g4', 'g5']);
      expect(updates[2].weightsHashAfter).toBe(baselineHash);
      expect(fs.readdirSync(path.join(s.dir, 'checkpoints', 'solver')).sort()).toEqual(['v0', 'v3']);
    },
    180_000,
  );
});
