import { ChildProcess, execFile } from 'child_process';
import * as net from 'net';
import * as path from 'path';
import { promisify } from 'util';
import { AgentEvent, AgentEventsProducer, createKafka, endOffsets, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { ensureKafka, outcome, output, SEED, sleep, spawnApp, tempDir, TINY_MODEL_JSON, transition, uniquePrefix, waitForExit } from '@srpo/testing';

const run = promisify(execFile);
const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'srpo.js');

interface UpdateSummary {
  updateId: string;
  versionAfter: number;
  weightsHashAfter: string;
}

interface ReplayJson {
  complete: boolean;
  matched: number;
  rows: { updateId: string; replayHash: string | null; match: boolean; cause?: string; detail?: string }[];
  firstDivergence?: { updateId: string; cause: string; detail: string };
  rematerialized: {
    events: number;
    eventsPerSecond: number;
    setsComplete: number;
    groups: number;
    compared: number;
    identical: number;
    sizeGroupsIdentical: boolean;
    differences: { groupId: string; closeReason: string; detail: string }[];
  };
}

const T0 = 1_767_225_600_000;
const GROUP_TTL_MS = 5_000;

/** One episode: `outputs` solver outputs and one transition into group `groupKey`; the reward comes with the transition or from an outcome. */
function episode(
  id: string,
  t: number,
  outputs: number,
  groupKey: string,
  size: number | null,
  reward: { immediate: number } | { outcome: number },
): AgentEvent[] {
  const events: AgentEvent[] = [];
  for (let n = 0; n < outputs; n++) {
    events.push({
      type: 'AgentOutput',
      value: output(id, n, {
        role: 'solver',
        policyId: 'solver',
        policyVersion: 0,
        contextTokenIds: [1, 2, 3],
        responseTokenIds: [4 + ((id.length + n) % 5), 5, 6],
        behaviourLogProbs: [-2.5, -2.75 - n / 8, -3],
        lossMask: [true, true, true],
        sampling: { temperature: 1, topK: 0, maxNewTokens: 3, seed: null, stopTokenIds: [] },
        startedAtMs: t,
        eventTimeMs: t,
      }),
    });
  }
  const immediate = 'immediate' in reward ? reward.immediate : null;
  events.push({
    type: 'Transition',
    value: transition(id, [...Array(outputs).keys()], { groupKey, expectedGroupSize: size, reward: immediate, eventTimeMs: t + 10 }),
  });
  if ('outcome' in reward) events.push({ type: 'EpisodeOutcome', value: outcome(id, reward.outcome, { eventTimeMs: t + 20 }) });
  return events;
}

/**
 * Each phase is materialized before the next is produced, so the live groups do not depend on
 * the order the live consumer read the partitions in: `dl` (no declared size) holds d1 and d2
 * and closes by deadline on a2's event time, after a2 completed `ga` by size (a group with a
 * declared size also times out: had b1's set reached the group task before a2's, `ga` would have
 * closed by deadline with a1 alone). Groups gb and gc close by size.
 */
const PHASE_1 = [
  ...episode('d1', T0, 1, 'dl', null, { outcome: 1 }),
  ...episode('a1', T0 + 1_500, 2, 'ga', 2, { immediate: 0 }),
  ...episode('d2', T0 + 2_000, 1, 'dl', null, { immediate: 0 }),
];
const PHASE_2 = episode('a2', T0 + 10_000, 1, 'ga', 2, { outcome: 1 });
const PHASE_3 = [
  ...episode('b1', T0 + 10_100, 2, 'gb', 2, { immediate: 1 }),
  ...episode('b2', T0 + 10_200, 1, 'gb', 2, { immediate: 0 }),
  ...episode('c1', T0 + 10_300, 1, 'gc', 2, { outcome: 0.5 }),
  ...episode('c2', T0 + 10_400, 2, 'gc', 2, { outcome: 1 }),
];
const GROUPS = 4;

/** A port nothing listens on now (other suites on this machine pick ports at random). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function ours(stderr: string): string {
  return stderr
    .split('\n')
    .filter((l) => !/^(WARNING: All log messages before absl|I0000 |W0000 )/.test(l))
    .join('\n');
}

describe('replay --rematerialize on a short training from raw events (real broker, real processes)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'replay-remat-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('remat');
  const catalog = topicCatalog({ prefix, rawPartitions: 2, derivedPartitions: 1 });
  const dir = tempDir('remat');
  let port = 0;
  const sqlite = path.join(dir, 'learner.sqlite');
  const common = {
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: '2',
    SRPO_DERIVED_PARTITIONS: '1',
    SRPO_GROUP_TTL_MS: String(GROUP_TTL_MS),
  };
  let updates: UpdateSummary[] = [];
  let sourceEnds = new Map<string, number>();
  const children: ChildProcess[] = [];

  async function srpo(args: string[], extra: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ...common,
      SRPO_SQLITE_PATH: sqlite,
      SRPO_REPLAY_DIR: path.join(dir, 'replays'),
      SRPO_BACKEND: 'tensorflow',
      SRPO_LOG_LEVEL: 'error',
      ...extra,
    };
    try {
      const { stdout, stderr } = await run('node', [bin, ...args], { env, timeout: 180_000, maxBuffer: 64 * 1024 * 1024 });
      return { code: 0, stdout, stderr: ours(stderr) };
    } catch (e) {
      const err = e as { code: number; stdout: string; stderr: string };
      return { code: err.code, stdout: err.stdout, stderr: ours(err.stderr) };
    }
  }

  async function total(topic: string): Promise<number> {
    const admin = kafka.admin();
    await admin.connect();
    try {
      return [...(await endOffsets(admin, [topic])).values()].reduce((a, b) => a + b, 0);
    } finally {
      await admin.disconnect();
    }
  }

  async function allEnds(): Promise<Map<string, number>> {
    const admin = kafka.admin();
    await admin.connect();
    try {
      return await endOffsets(
        admin,
        catalog.all().map((t) => t.name),
      );
    } finally {
      await admin.disconnect();
    }
  }

  beforeAll(async () => {
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    port = await freePort();
    children.push(
      spawnApp(
        'materializer',
        { ...common, SRPO_APP_ID: `${prefix}materializer`, SRPO_SESSION_TIMEOUT_MS: '6000', SRPO_LOG_LEVEL: 'info' },
        path.join(dir, 'materializer.log'),
      ),
    );
    children.push(
      spawnApp(
        'learner',
        {
          ...common,
          SRPO_POLICY_ID: 'solver',
          SRPO_SQLITE_PATH: sqlite,
          SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
          SRPO_SETS_PER_UPDATE: '2',
          SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
          SRPO_SEED: String(SEED),
          SRPO_MAX_POLICY_LAG: '100',
          SRPO_SESSION_TIMEOUT_MS: '6000',
          SRPO_CONSUMER_GROUP: `${prefix}learner`,
          SRPO_HTTP_PORT: String(port),
          SRPO_BACKEND: 'tensorflow',
          SRPO_LOG_LEVEL: 'info',
        },
        path.join(dir, 'learner.log'),
      ),
    );
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    const deadline = Date.now() + 120_000;
    for (const [phase, setsAfter] of [
      [PHASE_1, 3],
      [PHASE_2, 4],
    ] as const) {
      await sdk.emitBatch(phase);
      // Count the sets themselves: the topic's end offset also counts the transactions' commit
      // markers, so it reached 4 after phase 1 alone, and phase 3 could then overtake a2 (its
      // set reaching the group task first closes `ga` by deadline with a1 alone).
      while ((await readTopicsToEnd(kafka, [catalog.activeSets.name])).length < setsAfter) {
        if (Date.now() > deadline) throw new Error(`the materializer did not emit ${setsAfter} sets in time; logs in ${dir}`);
        await sleep(250);
      }
    }
    await sdk.emitBatch(PHASE_3);
    await sdk.disconnect();
    // How the learner cuts groups into updates depends on what it has read when it polls; the
    // training is over once its ledger holds every group. (Committed offsets are no measure:
    // the groups topic is written in transactions, whose commit markers take offsets too.)
    const applied = async (): Promise<UpdateSummary[]> => {
      const list = (await (await fetch(`http://127.0.0.1:${port}/updates?policy=solver`)).json()) as UpdateSummary[];
      let groups = 0;
      for (const u of list)
        groups += ((await (await fetch(`http://127.0.0.1:${port}/updates/${encodeURIComponent(u.updateId)}`)).json()) as { groups: unknown[] }).groups.length;
      return groups >= GROUPS ? list : [];
    };
    for (;;) {
      for (const c of children)
        if (c.exitCode !== null || c.signalCode !== null) throw new Error(`a child exited (${c.exitCode ?? c.signalCode}); logs in ${dir}`);
      // Until the learner's HTTP server is up, fetch fails: keep polling.
      updates = await applied().catch(() => []);
      if (updates.length > 0) break;
      if (Date.now() > deadline) throw new Error(`the learner did not apply the ${GROUPS} groups in time; logs in ${dir}`);
      await sleep(250);
    }
    expect(updates.length).toBeGreaterThanOrEqual(2);
    for (const c of children) {
      c.kill('SIGTERM');
      await waitForExit(c);
    }
    sourceEnds = await allEnds();
  }, 200_000);

  afterAll(async () => {
    for (const c of children) {
      if (c.exitCode === null && c.signalCode === null) {
        c.kill('SIGTERM');
        await waitForExit(c);
      }
    }
  });

  it('re-derives identical groups from the raw events and reproduces every weights hash', async () => {
    const recordedGroups = (await readTopicsToEnd(kafka, [catalog.advantageGroups.name])).map((r) => codec.decodeAs('AdvantageGroup', r.value));
    expect(recordedGroups.map((g) => [g.groupKey, g.closeReason, g.sets.map((s) => s.set.setId)]).sort()).toEqual([
      ['solver|dl', 'DEADLINE', ['d1/t0', 'd2/t0']],
      ['solver|ga', 'SIZE', ['a1/t0', 'a2/t0']],
      ['solver|gb', 'SIZE', ['b1/t0', 'b2/t0']],
      ['solver|gc', 'SIZE', ['c1/t0', 'c2/t0']],
    ]);

    const res = await srpo(['replay', '--run', 'remat', '--policy', 'solver', '--rematerialize', '--json']);
    // Exit 0, and nothing on stderr but the progress lines.
    expect([res.code, res.stderr.split('\n').filter((l) => l !== '' && !/^(rematerialize|replay) remat: /.test(l))]).toEqual([0, []]);
    const report = JSON.parse(res.stdout) as ReplayJson;
    expect(report.complete).toBe(true);
    expect(report.rows.map((r) => [r.updateId, r.replayHash, r.match])).toEqual(updates.map((u) => [u.updateId, u.weightsHashAfter, true]));
    expect(report.matched).toBe(updates.length);
    expect(report.firstDivergence).toBeUndefined();
    const m = report.rematerialized;
    expect(m.events).toBe(PHASE_1.length + PHASE_2.length + PHASE_3.length);
    expect(m.setsComplete).toBe(8);
    expect(m.groups).toBe(4);
    expect([m.compared, m.identical, m.differences, m.sizeGroupsIdentical]).toEqual([4, 4, [], true]);
    expect(m.eventsPerSecond).toBeGreaterThan(0);
    expect(res.stderr).toMatch(/rematerialize remat: process {1}\[#{30}\] 23\/23, \d+ events\/s, ETA 0\.0 s/);
    expect(res.stderr).toContain(`replay remat: ${updates.length}/${updates.length} updates, ${GROUPS} events`);

    // The run's own topics hold the re-derived groups, identical to the recorded ones apart from where their sets were written.
    const runGroups = (await readTopicsToEnd(kafka, [`${prefix}replay.remat.advantage-groups`])).map((r) => codec.decodeAs('AdvantageGroup', r.value));
    const strip = (g: (typeof runGroups)[number]) => ({ ...g, sets: g.sets.map((s) => ({ ...s, setSource: null })) });
    expect(runGroups.map(strip).sort((a, b) => a.groupId.localeCompare(b.groupId))).toEqual(
      recordedGroups.map(strip).sort((a, b) => a.groupId.localeCompare(b.groupId)),
    );
    for (const g of runGroups) for (const s of g.sets) expect(s.setSource.topic).toBe(`${prefix}replay.remat.active-sets`);
    expect(await total(`${prefix}replay.remat.active-sets`)).toBe(8);

    // Source topics were only read.
    expect(await allEnds()).toEqual(sourceEnds);
  }, 240_000);

  it('lists a deadline group that re-derives differently and names the first divergence', async () => {
    // A shorter group deadline than the live run's: group dl now closes at a1's set, before d2 arrives.
    const res = await srpo(['replay', '--run', 'short-ttl', '--policy', 'solver', '--rematerialize', '--json'], { SRPO_GROUP_TTL_MS: '1000' });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/^srpo: \[INTEGRITY_FAILED\] replay short-ttl diverged first at .* \(different inputs\)/m);
    const report = JSON.parse(res.stdout) as ReplayJson;
    const m = report.rematerialized;
    expect(m.sizeGroupsIdentical).toBe(true);
    expect(m.differences).toHaveLength(1);
    expect(m.differences[0]).toMatchObject({ closeReason: 'DEADLINE' });
    expect(m.differences[0].groupId).toMatch(/^solver\|dl#/);
    expect(m.differences[0].detail).toMatch(/^re-derived with other members: its sets are in solver\|dl#\w+ \(DEADLINE\), solver\|dl#\w+ \(DEADLINE\)$/);
    expect(m.identical).toBe(3);
    const dlUpdate = report.rows.find((r) => r.cause === 'different inputs');
    expect(dlUpdate?.detail).toContain(m.differences[0].groupId);
    expect(dlUpdate?.updateId).toBe(report.firstDivergence?.updateId);
    expect(report.rows.filter((r) => !r.match).length).toBeGreaterThanOrEqual(1);
    expect(await allEnds()).toEqual(sourceEnds);
  }, 240_000);

  it('fails when a size-closed group re-derives differently, naming the group and the field', async () => {
    // Other advantage settings than the live materializer's: same members, other advantages.
    const res = await srpo(['replay', '--run', 'population', '--policy', 'solver', '--rematerialize', '--json'], { SRPO_ADVANTAGE_STD: 'population' });
    expect(res.code).toBe(1);
    const report = JSON.parse(res.stdout) as ReplayJson;
    const m = report.rematerialized;
    expect(m.sizeGroupsIdentical).toBe(false);
    expect(m.identical).toBe(0);
    expect(m.differences.map((d) => d.closeReason).sort()).toEqual(['DEADLINE', 'SIZE', 'SIZE', 'SIZE']);
    for (const d of m.differences) expect(d.detail).toMatch(/^group\.sets\[0\]\.advantage: recorded -?[\d.e-]+, re-derived -?[\d.e-]+$/);
    expect(report.firstDivergence?.cause).toBe('different inputs');
    expect(res.stderr).toMatch(
      /^srpo: \[INTEGRITY_FAILED\] replay population: 3 size-closed group\(s\) re-derived differently, first solver\|g[abc]#\w+: group\.sets\[0\]\.advantage: recorded/m,
    );
    expect(await allEnds()).toEqual(sourceEnds);
  }, 240_000);
});
