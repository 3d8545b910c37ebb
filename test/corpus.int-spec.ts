import { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Producer } from 'kafkajs';
import {
  AdvantageGroup,
  AgentEvent,
  AgentEventsProducer,
  createKafka,
  ensureTopics,
  EventCodec,
  PolicyVersion,
  readTopicsToEnd,
  ReasonCode,
  toPlain,
  topicCatalog,
  TopicCatalog,
} from '@srpo/events';
import { ensureKafka, sleep, spawnApp, uniquePrefix, verifyExactlyOnce, waitForExit } from '@srpo/testing';
import { BAD_EVENTS, BadEvent, CORPUS_MAX_PAYLOAD_BYTES } from './corpus/bad-events';
import { CORPUS_T, PHASES, PUBLISHED_POLICY_VERSION, VALID_SET_IDS, validStream } from './corpus/valid-stream';

/**
 * Issue #10: the bad-input corpus, interleaved with a valid stream, through the real
 * materializer (dist/, its own process). A clean run of the same valid stream on
 * another topic prefix runs beside it. Then:
 * - every bad event is in the dead-letter topic once, with its reason and original bytes;
 * - the corpus run's advantage groups equal the clean run's (ids, sets, advantages),
 *   which equal independently worked-out values;
 * - the materializer never exited and its consumer never restarted;
 * - `/metrics` counts every reason exactly.
 */
const codec = new EventCodec();
const brokers = ensureKafka();
const kafka = createKafka({ brokers, clientId: 'corpus-test' });

const SETTINGS = {
  SRPO_RAW_PARTITIONS: '1',
  SRPO_DERIVED_PARTITIONS: '1',
  SRPO_SET_TTL_MS: '5000',
  SRPO_GROUP_TTL_MS: '5000',
  SRPO_MAX_PAYLOAD_BYTES: String(CORPUS_MAX_PAYLOAD_BYTES),
  SRPO_SESSION_TIMEOUT_MS: '6000',
  SRPO_LOG_LEVEL: 'info',
};

interface Sent {
  bad: BadEvent;
  key: string;
  value: Buffer;
}

interface Run {
  catalog: TopicCatalog;
  child: ChildProcess;
  port: number;
  log: string;
  learner: ChildProcess;
  learnerPort: number;
  learnerLog: string;
  /** Bad events by `topic:partition:offset`. */
  sent: Map<string, Sent>;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-corpus-'));
// Below Linux's ephemeral range (32768-60999): a port there can be taken by any outgoing socket.
let nextPort = 26_000 + Math.floor(Math.random() * 1000);
const children: ChildProcess[] = [];

/** SIGTERM, then SIGKILL after 10 s; resolves with the exit code. */
function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  return waitForExit(child).finally(() => clearTimeout(timer));
}

afterAll(async () => {
  await Promise.all(children.map(stop));
});

async function start(label: string): Promise<Run> {
  const prefix = uniquePrefix(label);
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const admin = kafka.admin();
  await admin.connect();
  try {
    await ensureTopics(admin, catalog.all());
  } finally {
    await admin.disconnect();
  }
  // The announcement of the initial weights, which the agents sampled with.
  const producer = kafka.producer();
  await producer.connect();
  const initial: PolicyVersion = {
    policyId: 'worker',
    version: PUBLISHED_POLICY_VERSION,
    weightsHash: 'f'.repeat(64),
    checkpointUri: 'file:///tmp/worker/v0',
    updateId: null,
    eventTimeMs: CORPUS_T,
  };
  await producer.send({ topic: catalog.policyVersions.name, acks: -1, messages: [{ key: 'worker', value: codec.encode('PolicyVersion', initial) }] });
  await producer.disconnect();
  const port = nextPort++;
  const log = path.join(dir, `${label}.log`);
  const child = spawnApp('materializer', { KAFKA_BROKERS: brokers.join(','), SRPO_TOPIC_PREFIX: prefix, SRPO_METRICS_PORT: String(port), ...SETTINGS }, log);
  children.push(child);
  const learnerPort = nextPort++;
  const learnerLog = path.join(dir, `${label}-learner.log`);
  const learner = spawnApp(
    'learner',
    {
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_POLICY_ID: 'worker',
      SRPO_CONSUMER_GROUP: `${prefix}learner`,
      SRPO_SQLITE_PATH: path.join(dir, `${label}.sqlite`),
      SRPO_CHECKPOINT_DIR: path.join(dir, `${label}-checkpoints`),
      SRPO_SETS_PER_UPDATE: '2',
      SRPO_MODEL_CONFIG: JSON.stringify({ vocabSize: 16, dModel: 8, nLayers: 1, nHeads: 2, maxSeqLen: 16 }),
      SRPO_SEED: '7',
      SRPO_MAX_POLICY_LAG: '100',
      SRPO_SESSION_TIMEOUT_MS: '6000',
      SRPO_HTTP_PORT: String(learnerPort),
      SRPO_BACKEND: 'tensorflow',
      SRPO_LOG_LEVEL: 'info',
    },
    learnerLog,
  );
  children.push(learner);
  return { catalog, child, port, log, learner, learnerPort, learnerLog, sent: new Map() };
}

interface UpdateSummary {
  updateId: string;
  versionBefore: number;
  versionAfter: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
}

/**
 * The learner's updates once its ledger holds `groups` groups. The ledger, not the committed
 * offsets: the groups topic is written in transactions, and each commit marker takes an offset,
 * so the committed offset can pass `groups` while the last group is still being trained on.
 */
async function learnerUpdates(run: Run, groups: number, timeoutMs = 150_000): Promise<{ update: UpdateSummary; groupIds: string[] }[]> {
  const get = async <T>(url: string): Promise<T> => (await fetch(`http://127.0.0.1:${run.learnerPort}${url}`)).json() as Promise<T>;
  const read = async () => {
    const updates = await get<UpdateSummary[]>('/updates?policy=worker&limit=1000');
    return Promise.all(
      updates.map(async (update) => ({
        update,
        groupIds: (await get<{ groups: { groupId: string }[] }>(`/updates/${update.updateId}`)).groups.map((g) => g.groupId),
      })),
    );
  };
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (run.learner.exitCode !== null || run.learner.signalCode !== null) throw new Error(`learner of ${run.catalog.prefix} exited`);
    const updates = await read().catch(() => []);
    const trained = updates.reduce((n, u) => n + u.groupIds.length, 0);
    if (trained >= groups) return updates;
    if (Date.now() > deadline) throw new Error(`learner of ${run.catalog.prefix} recorded ${trained} of ${groups} groups after ${timeoutMs} ms`);
    await sleep(500);
  }
}

/** Waits until the sets sub-topology committed every record of the raw topics. */
async function waitConsumed(run: Run, timeoutMs = 150_000): Promise<void> {
  const { catalog } = run;
  const topics = [catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name];
  const admin = kafka.admin();
  await admin.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let behind = 0;
      try {
        const committed = await admin.fetchOffsets({ groupId: `${catalog.prefix}materializer.sets`, topics });
        for (const t of topics) {
          for (const end of await admin.fetchTopicOffsets(t)) {
            const c = committed.find((x) => x.topic === t)?.partitions.find((p) => p.partition === end.partition);
            if (Math.max(0, Number(c?.offset ?? -1)) < Number(end.high)) behind++;
          }
        }
      } catch (e) {
        // A freshly started broker answers COORDINATOR_LOAD_IN_PROGRESS for a while; kafkajs's admin does not retry it.
        if (!(e as { retriable?: boolean }).retriable) throw e;
        behind = 1;
      }
      if (behind === 0) return;
      if (Date.now() > deadline) throw new Error(`the materializer did not consume ${catalog.prefix} raw topics within ${timeoutMs} ms`);
      await sleep(200);
    }
  } finally {
    await admin.disconnect();
  }
}

/** Produces the valid stream phase by phase; with `corpus`, every bad event of a phase after the phase's valid events in turn. */
async function feed(run: Run, corpus: BadEvent[]): Promise<void> {
  const sdk = new AgentEventsProducer({ kafka, topics: run.catalog });
  const raw: Producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await raw.connect();
  try {
    const valid = validStream();
    for (const phase of PHASES) {
      const good: AgentEvent[] = valid[phase];
      const bad = corpus.filter((b) => b.phase === phase);
      for (let i = 0; i < Math.max(good.length, bad.length); i++) {
        if (i < good.length) await sdk.emitBatch([good[i]]);
        if (i < bad.length) {
          const b = bad[i];
          const { key, value } = b.build(codec);
          const topic = run.catalog[b.topic].name;
          const [meta] = await raw.send({ topic, acks: -1, messages: [{ key, value }] });
          run.sent.set(`${topic}:${meta.partition}:${meta.baseOffset}`, { bad: b, key, value });
        }
      }
      // Phases are separated so that relations have their referents processed first (docs/bad-input.md).
      await waitConsumed(run);
    }
  } finally {
    await sdk.disconnect();
    await raw.disconnect();
  }
}

async function readUntil<T>(read: () => Promise<T[]>, count: number, timeoutMs = 120_000): Promise<T[]> {
  const deadline = Date.now() + timeoutMs;
  let last: T[] = [];
  while (Date.now() < deadline) {
    last = await read();
    if (last.length >= count) return last;
    await sleep(500);
  }
  return last;
}

const groupsOf = (run: Run) => async () =>
  (await readTopicsToEnd(kafka, [run.catalog.advantageGroups.name])).map((r) => toPlain(codec.decodeAs('AdvantageGroup', r.value)));
const deadLettersOf = (run: Run) => async () =>
  (await readTopicsToEnd(kafka, [run.catalog.deadLetter.name])).map((r) => toPlain(codec.decodeAs('DeadLetter', r.value)));

/** What training sees of a group: its identity, membership and advantages. */
function trainingView(groups: AdvantageGroup[]) {
  return groups
    .map((g) => ({
      groupId: g.groupId,
      groupKey: g.groupKey,
      closeReason: g.closeReason,
      rewardMean: g.rewardMean,
      rewardStd: g.rewardStd,
      sets: g.sets.map((s) => ({
        setId: s.set.setId,
        advantage: s.advantage,
        reward: s.set.reward,
        members: s.set.members.map((m) => [m.outputId, m.output.toString('hex')]),
      })),
    }))
    .sort((a, b) => (a.groupKey < b.groupKey ? -1 : 1));
}

async function deadLetterMetrics(port: number): Promise<Record<string, number>> {
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
  const counts: Record<string, number> = {};
  for (const m of text.matchAll(/^srpo_deadletter_total\{reason="([A-Z_]+)"\} (\d+)$/gm)) counts[m[1]] = Number(m[2]);
  return counts;
}

describe('the bad-input corpus through the real materializer', () => {
  it('has at least 30 kinds, each with a distinct name', () => {
    expect(BAD_EVENTS.length).toBeGreaterThanOrEqual(30);
    expect(new Set(BAD_EVENTS.map((b) => b.name)).size).toBe(BAD_EVENTS.length);
  });

  it('dead-letters every bad event with its reason and bytes, trains on the valid stream as a clean run does, and keeps running', async () => {
    const [clean, dirty] = await Promise.all([start('corpusclean'), start('corpusdirty')]);
    // Both feeds finish before anything fails, so no producer outlives the test.
    const fed = await Promise.allSettled([feed(clean, []), feed(dirty, BAD_EVENTS)]);
    for (const f of fed) if (f.status === 'rejected') throw f.reason;
    expect(dirty.sent.size).toBe(BAD_EVENTS.length);

    // Four groups: g1, g2, task-d, task-clock (valid-stream.ts).
    const [cleanGroups, dirtyGroups, dead] = await Promise.all([
      readUntil(groupsOf(clean), 4),
      readUntil(groupsOf(dirty), 4),
      readUntil(deadLettersOf(dirty), BAD_EVENTS.length),
    ]);

    // Every bad event, once, with its reason, its key and its original bytes.
    const seen = dead.map((d) => {
      const s = dirty.sent.get(`${d.source.topic}:${d.source.partition}:${d.source.offset}`);
      return {
        name: s?.bad.name ?? `unexpected ${d.reasonCode} at ${d.source.topic}@${d.source.offset}: ${d.reason}`,
        reasonCode: d.reasonCode,
        sameBytes: s !== undefined && d.originalValue !== null && Buffer.compare(d.originalValue, s.value) === 0,
        sameKey: s !== undefined && (d.originalKey ?? Buffer.alloc(0)).toString('utf8') === s.key,
      };
    });
    const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    expect(seen.sort(byName)).toEqual(BAD_EVENTS.map((b) => ({ name: b.name, reasonCode: b.expected, sameBytes: true, sameKey: true })).sort(byName));

    // The valid stream trains exactly as in the clean run.
    expect(trainingView(dirtyGroups)).toEqual(trainingView(cleanGroups));
    // ... and the clean run's groups are the ones worked out by hand in valid-stream.ts.
    const view = new Map(trainingView(cleanGroups).map((g) => [g.groupKey, g]));
    const advantages = (key: string) => view.get(key)?.sets.map((s) => [s.setId, s.advantage]);
    const eps = 1e-6;
    const g1 = (r: number) => (r - 2 / 3) / (Math.sqrt(1 / 3) + eps); // rewards 1, 0, 1: sample std sqrt(1/3)
    const g2 = (r: number) => (r - 0.625) / (0.375 * Math.SQRT2 + eps); // rewards 1, 0.25
    const gd = (r: number) => (r - 0.5) / (Math.SQRT1_2 + eps); // rewards 1, 0
    expect([...view.keys()]).toEqual(['worker|g1', 'worker|g2', 'worker|task-clock/solve', 'worker|task-d/solve']);
    const close = (actual: (string | number)[][] | undefined, expected: [string, number][]) => {
      expect(actual?.map(([id]) => id)).toEqual(expected.map(([id]) => id));
      actual?.forEach(([, a], i) => expect(a as number).toBeCloseTo(expected[i][1], 9));
    };
    close(advantages('worker|g1'), [
      ['v1/t0', g1(1)],
      ['v2/t0', g1(0)],
      ['v3/t0', g1(1)],
    ]);
    close(advantages('worker|g2'), [
      ['v4/t0', g2(1)],
      ['v5/t0', g2(0.25)],
    ]);
    close(advantages('worker|task-d/solve'), [
      ['d1/t0', gd(1)],
      ['d2/t0', gd(0)],
    ]);
    close(advantages('worker|task-clock/solve'), [
      ['c1/t0', 0],
      ['c2/t0', 0],
    ]);
    expect(view.get('worker|g1')?.closeReason).toBe('SIZE');
    expect(view.get('worker|task-d/solve')?.closeReason).toBe('DEADLINE');

    // The learner trains on them identically: same groups per update, same weights after each.
    const [cleanUpdates, dirtyUpdates] = await Promise.all([learnerUpdates(clean, 4), learnerUpdates(dirty, 4)]);
    const trained = (updates: { update: UpdateSummary; groupIds: string[] }[]) =>
      updates.map(({ update, groupIds }) => ({
        versions: [update.versionBefore, update.versionAfter],
        weights: [update.weightsHashBefore, update.weightsHashAfter],
        groupIds,
      }));
    expect(trained(dirtyUpdates)).toEqual(trained(cleanUpdates));
    // Two sets per update and four groups of 2+ sets: one update per group, in log order.
    expect(cleanUpdates.map((u) => u.groupIds.map((id) => id.split('#')[0]))).toEqual([
      ['worker|g1'],
      ['worker|g2'],
      ['worker|task-d/solve'],
      ['worker|task-clock/solve'],
    ]);

    // Exactly once, nothing invalidated: the late outcome of v5 still found its set waiting.
    for (const run of [clean, dirty]) {
      const report = await verifyExactlyOnce(kafka, run.catalog, VALID_SET_IDS);
      expect(report).toMatchObject({
        openTransactions: [],
        missingSets: [],
        duplicateSets: [],
        ungroupedSets: [],
        multiplyGroupedSets: [],
        duplicateGroups: [],
        invalidSets: [],
      });
    }
    expect(await deadLettersOf(clean)()).toEqual([]);

    // Metrics count each reason.
    const expectedCounts: Record<string, number> = {};
    for (const b of BAD_EVENTS) expectedCounts[b.expected] = (expectedCounts[b.expected] ?? 0) + 1;
    expect(await deadLetterMetrics(dirty.port)).toEqual(expectedCounts);
    expect(await deadLetterMetrics(clean.port)).toEqual({});
    // Every dead-letter reason of bad input is exercised; three only ever mark sets on invalid-sets,
    // and PROCESSING_FAILED is the runtime's verdict on a processor that throws (test/stream-faults.int-spec.ts).
    const notBadInput: string[] = [
      ReasonCode.MEMBER_MISSING_AT_TTL,
      ReasonCode.REWARD_MISSING_AT_TTL,
      ReasonCode.MIXED_POLICY_SET,
      ReasonCode.PROCESSING_FAILED,
    ];
    expect(Object.keys(expectedCounts).sort()).toEqual(
      Object.values(ReasonCode)
        .filter((r) => !notBadInput.includes(r))
        .sort(),
    );

    // No process crashed, and no consumer had to be recreated.
    for (const run of [clean, dirty]) {
      for (const p of [run.child, run.learner]) expect({ exitCode: p.exitCode, signal: p.signalCode }).toEqual({ exitCode: null, signal: null });
      expect(fs.readFileSync(run.log, 'utf8')).not.toMatch(/consumer crashed|uncaught|unhandled/i);
    }
    // ... and the materializers still stop cleanly.
    expect(await Promise.all([stop(clean.child), stop(dirty.child)])).toEqual([0, 0]);
  }, 400_000);
});
