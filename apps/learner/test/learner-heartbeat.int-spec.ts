import { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { AdvantageGroup, createKafka, ensureTopics, topicCatalog } from '@srpo/events';
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
  wallTimeMs: number;
}

interface UpdateDetailBody extends UpdateSummary {
  groups: { groupId: string }[];
  diagnostics: Record<string, number>;
}

/** The broker's `group.min.session.timeout.ms` (Kafka's default; infra/kafka/kafka.sh leaves it). */
const SESSION_TIMEOUT_MS = 6_000;
const SLOW_PIECE_MS = 1_000;
const EPOCHS = 3;
const GROUPS = 4;
const SETS_PER_UPDATE = 2;
/**
 * Pieces of one update: two one-member sets, each row its own micro-batch (a budget of 1
 * position), so per epoch 2 forward + 2 backward micro-batches and the epoch's end.
 */
const PIECES_PER_UPDATE = EPOCHS * (2 * SETS_PER_UPDATE + 1);

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

async function waitForUpdates(port: number, count: number, child: ChildProcess, timeoutMs: number): Promise<UpdateSummary[]> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`learner exited (${child.exitCode ?? child.signalCode})`);
    const updates = await getJson<UpdateSummary[]>(port, '/updates?policy=solver').catch(() => undefined);
    if (updates && updates.length >= count) return updates;
    await sleep(500);
  }
  throw new Error(`fewer than ${count} updates after ${timeoutMs} ms`);
}

let nextPort = 24_000 + Math.floor(Math.random() * 1000);

/**
 * The learner keeps its group membership through updates far longer than its session timeout
 * (issue #39): each micro-batch, pass and epoch blocks the event loop for a second more
 * (SRPO_SLOW_MICRO_BATCH_MS, as a large model's micro-batch does), so one update blocks for
 * about 15 s against a 6 s session, and heartbeats can only leave between pieces. The member
 * is never evicted: one assignment, no consumer restart, every group applied once and the
 * offsets committed. Without the yields between pieces the first commit fails ("The
 * coordinator is not aware of this member") and the consumer crashes and redoes the batch.
 */
describe('learner whose update outlasts its session timeout (real broker, real process)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'learner-heartbeat-test' });

  it('heartbeats between micro-batches: no eviction, no rebalance, every group applied once, offsets committed', async () => {
    const prefix = uniquePrefix('heartbeat');
    const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, catalog.all());
      await produceGroups(kafka, catalog.advantageGroups.name, groups());
      const dir = tempDir('heartbeat');
      const port = nextPort++;
      const groupId = `${prefix}learner`;
      const log = path.join(dir, 'learner.log');
      const child = spawnApp(
        'learner',
        {
          KAFKA_BROKERS: brokers.join(','),
          SRPO_TOPIC_PREFIX: prefix,
          SRPO_POLICY_ID: 'solver',
          SRPO_CONSUMER_GROUP: groupId,
          SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'),
          SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
          SRPO_SETS_PER_UPDATE: String(SETS_PER_UPDATE),
          SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
          SRPO_SEED: String(SEED),
          SRPO_MAX_POLICY_LAG: '100',
          SRPO_EPOCHS: String(EPOCHS),
          SRPO_MICRO_BATCH_TOKENS: '1',
          SRPO_SLOW_MICRO_BATCH_MS: String(SLOW_PIECE_MS),
          SRPO_SESSION_TIMEOUT_MS: String(SESSION_TIMEOUT_MS),
          SRPO_HTTP_PORT: String(port),
          SRPO_BACKEND: 'tensorflow',
          SRPO_LOG_LEVEL: 'info',
        },
        log,
      );
      let updates: UpdateSummary[];
      let details: UpdateDetailBody[];
      try {
        updates = await waitForUpdates(port, GROUPS / SETS_PER_UPDATE, child, 150_000);
        details = await Promise.all(updates.map((u) => getJson<UpdateDetailBody>(port, `/updates/${u.updateId}`)));
        const committed = async () => Number((await admin.fetchOffsets({ groupId, topics: [catalog.advantageGroups.name] }))[0].partitions[0].offset);
        const deadline = Date.now() + 20_000;
        while ((await committed()) !== GROUPS && Date.now() < deadline) await sleep(250);
        expect(await committed()).toBe(GROUPS);
      } finally {
        child.kill('SIGTERM');
        await waitForExit(child);
      }
      expect(updates.map((u) => [u.versionBefore, u.versionAfter])).toEqual([
        [0, 1],
        [1, 2],
      ]);
      expect(details.flatMap((d) => d.groups.map((g) => g.groupId))).toEqual(['g0', 'g1', 'g2', 'g3']);
      for (const d of details) {
        // Every row its own micro-batch, as the pieces above assume; each update outlasted twice the session.
        expect(d.diagnostics['memory/micro_batches']).toBe(SETS_PER_UPDATE);
        expect(d.wallTimeMs).toBeGreaterThanOrEqual(PIECES_PER_UPDATE * SLOW_PIECE_MS);
      }
      expect(PIECES_PER_UPDATE * SLOW_PIECE_MS).toBeGreaterThan(2 * SESSION_TIMEOUT_MS);
      const text = fs.readFileSync(log, 'utf8');
      expect(text.match(/"msg":"assignment"/g)).toHaveLength(1);
      expect(text).not.toMatch(/consumer crashed|not aware of this member|sink write failed/);
    } finally {
      await admin.deleteTopics({ topics: catalog.all().map((t) => t.name) }).catch(() => undefined);
      await admin.disconnect();
    }
  }, 240_000);
});
