import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';
import { initTfBackend } from '@srpo/core';
import {
  AgentEventsProducer,
  completeAgentOutput,
  createKafka,
  endOffsets,
  ensureTopics,
  EventCodec,
  readTopicsToEnd,
  sealOutput,
  topicCatalog,
  type AgentOutput,
} from '@srpo/events';
import { CheckpointStore, loadCheckpoint, Policy, SeededRng, weightsHash } from '@srpo/policy';
import { CreditWeightedSftTrainer, type OfflineReport } from '@srpo/offline';
import { AuditStore, KeyStore } from '@srpo/store';
import { ensureKafka, uniquePrefix } from '@srpo/testing';
import { eventsOf, FixedWorkflow, ScriptedSampler, Tok } from '@srpo/workflows';

const run = promisify(execFile);
const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'srpo.js');
const D = (d: number) => Tok.DIGIT0 + d;
const MODEL = { vocabSize: 32, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 16 };

/**
 * Eight fixed-workflow episodes (modulus 4, one digit) played by a script:
 * - rows 0-3: the solver answers digit `row` (well-formed: reward >= 0.1) and the checker accepts (right: reward 1): usable;
 * - rows 4-5: the solver answers YES (malformed: reward 0, failed) and the checker rejects (right: reward 1):
 *   1 failed of 2 = 0.5, not above the limit, but the only step left is the checker's, which fulfils no task: no-instruction;
 * - rows 6-7: malformed answer and an invalid verdict (ROUTE, reward 0): no-successful-step.
 * Inside the range, rows 0-3 (alice) and 6 (bob) are written sealed, their keys in the learner's
 * store (docs/erasure.md), and bob is erased: rows 0-3 open and train as in the clear, row 6 is
 * left out as erased-content.
 */
const sampler = new ScriptedSampler(
  {
    solver: (_ctx, row) => [row < 4 ? D(row) : Tok.YES],
    checker: (ctx, row) => [ctx[2] >= D(0) && ctx[2] < D(4) ? Tok.YES : row < 6 ? Tok.NO : Tok.ROUTE],
  },
  // Both roles sample with the policy the job trains.
  () => 'solver',
);

describe('srpo offline over a real topic range (real broker)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'offline-int-test' });
  const prefix = uniquePrefix('offline');
  const catalog = topicCatalog({ prefix, rawPartitions: 2, derivedPartitions: 2 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-offline-'));
  const sqlite = path.join(dir, 'learner.sqlite');
  const env = {
    ...process.env,
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: '2',
    SRPO_DERIVED_PARTITIONS: '2',
    SRPO_SQLITE_PATH: sqlite,
    SRPO_BACKEND: 'tensorflow',
    SRPO_LOG_LEVEL: 'error',
  };
  let fromMs = 0;
  let toMs = 0;
  let startHash = '';

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    // The policy to train (and scorer), registered in the learner's store at version 0. Freshly
    // initialised, showing it any action raises the instruction's NLL (no positive credit at all), so it is first
    // taught the relation the scorer should find: answer a after BOS -> instruction [BOS SOLVE a+1 SEP].
    const policy = Policy.create('solver', MODEL, 11);
    const teacher = new CreditWeightedSftTrainer(policy, { lr: 1e-2 });
    const lessons = [0, 1, 2, 3].map((a) => ({ contextTokens: [Tok.BOS, D(a)], responseTokens: [Tok.BOS, Tok.SOLVE, D((a + 1) % 4), Tok.SEP], weight: 1 }));
    for (let i = 0; i < 40; i++) await teacher.step(lessons);
    teacher.dispose();
    const ckpt = new CheckpointStore(path.join(dir, 'checkpoints'));
    await ckpt.save(policy);
    startHash = await weightsHash(policy);
    const store = await AuditStore.open({ kind: 'sqlite', path: sqlite });
    await store.ensurePolicy('solver', ['solver', 'checker'], {
      version: 0,
      weightsHash: startHash,
      checkpointUri: `file://${ckpt.dirFor('solver', 0)}`,
      createdAtMs: Date.now(),
    });
    await store.close();
    policy.dispose();

    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    await sdk.connect();
    const keys = await KeyStore.open({ kind: 'sqlite', path: sqlite });
    const subjects: Record<string, string> = { 'inside.r0': 'alice', 'inside.r1': 'alice', 'inside.r2': 'alice', 'inside.r3': 'alice', 'inside.r6': 'bob' };
    const sealed = async (o: AgentOutput): Promise<AgentOutput> => {
      const subjectId = subjects[o.episodeId];
      return subjectId === undefined ? o : sealOutput({ ...o, subjectId }, await keys.keyFor(subjectId, o.episodeId, Date.now()));
    };
    const emit = async (taskInstanceId: string, seed: number) => {
      const rollouts = await new FixedWorkflow({ modulus: 4, workers: 2, reverseLength: 1, formatBonus: 0.1, blankProbability: 0.5 }, new SeededRng(seed)).play(
        taskInstanceId,
        8,
        sampler,
      );
      const { body, outcomes } = eventsOf(rollouts, Date.now());
      for (const e of body) if (e.type === 'AgentOutput') e.value = await sealed(completeAgentOutput(e.value));
      await sdk.emitBatch(body);
      await sdk.emitBatch(outcomes);
    };
    await emit('before', 1);
    await new Promise((r) => setTimeout(r, 50));
    fromMs = Date.now();
    await emit('inside', 2);
    toMs = Date.now() + 1;
    await new Promise((r) => setTimeout(r, 50));
    await emit('after', 3);
    await sdk.disconnect();
    expect((await keys.erase({ subjectId: 'bob' }, 'er-offline-int', Date.now())).erasure.keyIds).toHaveLength(1);
    await keys.close();
  }, 60_000);

  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('reads the range, publishes inferred tasks and credits, trains and records a new version', async () => {
    const raw = [catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name];
    const admin = kafka.admin();
    await admin.connect();
    const rawBefore = await endOffsets(admin, raw);
    await admin.disconnect();

    const { stdout, stderr } = await run(
      'node',
      [
        bin,
        'offline',
        '--from',
        String(fromMs),
        '--to',
        String(toMs),
        '--policy',
        'solver',
        '--credit',
        'best_prefix',
        '--run',
        'r1',
        '--steps',
        '4',
        '--batch-size',
        '4',
        '--runs-dir',
        path.join(dir, 'runs'),
        '--json',
      ],
      { env },
    );
    const report = JSON.parse(stdout) as OfflineReport;
    expect(stderr).toMatch(/offline \[#+\] 4\/5 train 4\/4/);
    // Only the 8 episodes inside [from, to): 4 used (sealed, opened), 2 + 1 left out, 1 erased, none cut by the edges.
    expect(report.trajectories).toBe(8);
    expect(report.usable).toBe(4);
    expect(report.excluded).toEqual({ 'incomplete-episode': 0, 'erased-content': 1, 'no-instruction': 2, 'no-successful-step': 1 });
    expect(report.unopened.map((u) => [u.episodeId, u.reason, u.outputIds.length])).toEqual([['inside.r6', 'erased-content', 2]]);
    expect(report.versionBefore).toBe(0);
    expect(report.versionAfter).toBe(1);
    expect(report.weightsHashBefore).toBe(startHash);
    expect(report.weightsHashAfter).not.toBe(startHash);

    // The raw topics were read, never written.
    const admin2 = kafka.admin();
    await admin2.connect();
    expect(await endOffsets(admin2, raw)).toEqual(rawBefore);
    await admin2.disconnect();

    // The inferred tasks and credits are events on their own topics.
    const codec = new EventCodec();
    const tasks = (await readTopicsToEnd(kafka, [catalog.inferredTasks.name])).map((r) => ({ r, v: codec.decodeAs('InferredTask', r.value) }));
    const credits = (await readTopicsToEnd(kafka, [catalog.actionCredits.name])).map((r) => ({
      r,
      v: codec.decodeAs('ActionCredit', r.value),
    }));
    expect(tasks).toHaveLength(8);
    expect(tasks.every(({ v }) => v.runId === 'r1' && v.episodeId.startsWith('inside.'))).toBe(true);
    const usable = tasks.filter(({ v }) => v.usable).sort((a, b) => (a.v.episodeId < b.v.episodeId ? -1 : 1));
    // Rollout g answered digit g: relabelled task digit g + 1 mod 4 -> [BOS SOLVE d SEP]
    expect(usable.map(({ v }) => [v.episodeId, v.instructionTokenIds])).toEqual(
      [0, 1, 2, 3].map((g) => [`inside.r${g}`, [Tok.BOS, Tok.SOLVE, D((g + 1) % 4), Tok.SEP]]),
    );
    expect(
      tasks
        .filter(({ v }) => !v.usable)
        .map(({ v }) => `${v.episodeId}:${v.excludedReason}`)
        .sort(),
    ).toEqual(['inside.r4:no-instruction', 'inside.r5:no-instruction', 'inside.r6:erased-content', 'inside.r7:no-successful-step']);
    // Two actions (solver, checker) per usable trajectory, both successful; best_prefix: c_k = B - L_k and B's update rule.
    expect(credits).toHaveLength(8);
    for (const g of [0, 1, 2, 3]) {
      const [s, c] = credits
        .filter(({ v }) => v.episodeId === `inside.r${g}`)
        .map(({ v }) => v)
        .sort((a, b) => a.step - b.step);
      expect([s.role, c.role, s.prefixIndex, c.prefixIndex]).toEqual(['solver', 'checker', 1, 2]);
      expect(s.credit).toBeCloseTo((s.nllBefore as number) - (s.nllAfter as number), 9);
      expect(c.credit).toBeCloseTo((c.nllBefore as number) - (c.nllAfter as number), 9);
      expect(c.nllBefore).toBe(s.credit >= 0 ? s.nllAfter : s.nllBefore);
      const top = Math.max(s.credit, c.credit, 0);
      expect(s.weight).toBeCloseTo(top > 0 ? Math.max(s.credit, 0) / top : 0, 9);
      expect(c.weight).toBeCloseTo(top > 0 ? Math.max(c.credit, 0) / top : 0, 9);
    }

    // The update is recorded like the learner's: hashes, checkpoint, one ledger row per trajectory with source coordinates.
    const store = await AuditStore.open({ kind: 'sqlite', path: report.store });
    try {
      const detail = await store.getUpdate(report.updateId);
      expect(detail.weightsHashAfter).toBe(report.weightsHashAfter);
      expect(detail.hyperparameters.creditMode).toBe('best_prefix');
      expect(detail.groups).toHaveLength(4);
      const outputs = await readTopicsToEnd(kafka, [catalog.agentOutputs.name]);
      for (const g of detail.groups) {
        expect(g.source.topic).toBe(catalog.inferredTasks.name);
        const task = tasks.find(({ r }) => r.partition === g.source.partition && r.offset === g.source.offset);
        expect(`offline/r1/${task?.v.episodeId}`).toBe(g.groupId);
        for (const s of g.sources) {
          const src = s.members[0].source;
          const rec = outputs.find((r) => r.partition === src.partition && r.offset === src.offset);
          expect(codec.decodeAs('AgentOutput', rec?.value ?? null).outputId).toBe(s.setId);
          expect(s.set.topic).toBe(catalog.actionCredits.name);
        }
      }
    } finally {
      await store.close();
    }
    const [updateEvent] = (await readTopicsToEnd(kafka, [`${prefix}offline.r1.policy-updates`])).map((r) => codec.decodeAs('PolicyUpdate', r.value));
    expect([updateEvent.updateId, updateEvent.versionAfter, updateEvent.weightsHashAfter, updateEvent.groupIds.length]).toEqual([
      report.updateId,
      1,
      report.weightsHashAfter,
      4,
    ]);
    const loaded = await loadCheckpoint(report.checkpointDir);
    expect(loaded.manifest.weightsHash).toBe(report.weightsHashAfter);
    loaded.policy.dispose();

    // A run name is used once.
    await expect(
      run('node', [bin, 'offline', '--from', String(fromMs), '--to', String(toMs), '--policy', 'solver', '--run', 'r1', '--runs-dir', path.join(dir, 'runs')], {
        env,
      }),
    ).rejects.toMatchObject({ stderr: expect.stringMatching(/\[CONFLICT\] run r1 already exists/) });
  }, 90_000);
});
