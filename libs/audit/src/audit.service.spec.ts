import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ErrorCode, Logger } from '@srpo/core';
import { AuditStore, ledgerEntryFromGroup, type UpdateDetail } from '@srpo/store';
import { activeSet, advantageGroup, member } from '@srpo/testing';
import { AuditService } from './audit.service';

Logger.configure({ level: 'warn' });

const HASH_0 = '0'.repeat(64);
const HASH_1 = '1'.repeat(64);
const T0 = 1_767_225_600_000;

describe('AuditService (store only)', () => {
  let dir: string;
  let store: AuditStore;
  let detail: UpdateDetail;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-audit-unit-'));
    store = await AuditStore.open({ kind: 'sqlite', path: path.join(dir, 'store.sqlite') });
    await store.ensurePolicy('solver', ['solver'], { version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/solver/v0', createdAtMs: T0 });
    const g = advantageGroup('g1', [
      { set: activeSet('g1/a', [member({ outputId: 'o1', logpOld: [-1, -1, -1] })]), advantage: 0.5 },
      { set: activeSet('g1/b', [member({ outputId: 'o2', logpOld: [-1, -1, -1] }), member({ outputId: 'o3', logpOld: [-1, -1, -1] })]), advantage: -0.5 },
    ]);
    detail = await store.recordUpdate(
      {
        updateId: 'solver.v1.x',
        policyId: 'solver',
        versionBefore: 0,
        versionAfter: 1,
        weightsHashBefore: HASH_0,
        weightsHashAfter: HASH_1,
        hyperparameters: { objective: { objective: 'gspo', clipLow: 0.1 }, lr: 0.01, epochs: 2, maxGradNorm: 0.5 },
        seed: 7,
        backend: 'cpu',
        codeVersion: 'test',
        loss: 0.25,
        gradNorm: 1,
        diagnostics: {},
        wallTimeMs: 1,
        checkpointUri: 'file:///ckpt/solver/v1',
        committedAtMs: T0 + 1,
      },
      [ledgerEntryFromGroup(g, { topic: 'srpo.advantage-groups', partition: 2, offset: 41 })],
    );
  });

  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('traces a set to its group, advantage, source events and update', async () => {
    const [t, ...rest] = await new AuditService({ store, backend: 'cpu' }).trace('g1/b');
    expect(rest).toEqual([]);
    const recorded = detail.groups[0].sources[1];
    expect(t).toEqual({
      setId: 'g1/b',
      policyId: 'solver',
      groupId: 'g1',
      groupKey: 'task-1/solve',
      groupSource: { topic: 'srpo.advantage-groups', partition: 2, offset: 41 },
      advantage: -0.5,
      position: 1,
      setSource: recorded.set,
      transition: recorded.transition,
      outcome: recorded.outcome,
      outputs: [
        { outputId: 'o2', source: recorded.members[0].source },
        { outputId: 'o3', source: recorded.members[1].source },
      ],
      update: { updateId: 'solver.v1.x', versionBefore: 0, versionAfter: 1, weightsHashAfter: HASH_1, committedAtMs: T0 + 1, loss: 0.25 },
    });
    await expect(new AuditService({ store, backend: 'cpu' }).trace('g1')).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });

  it("traces an episode's outcome revisions to the updates that used them, saying which are superseded", async () => {
    const used = detail.groups[0].sources[1].outcome as { topic: string; partition: number; offset: number };
    const outcomes = [
      { source: used, revision: 0, outcomeReward: 1, rewardSource: 'human', eventTimeMs: T0 },
      { source: { ...used, offset: used.offset + 5 }, revision: 1, outcomeReward: 0, rewardSource: 'human', eventTimeMs: T0 + 9 },
    ];
    const svc = new AuditService({ store, backend: 'cpu' });
    const trace = await svc.traceEpisode('ep-g1/b', { events: { outcomes, transitionIds: ['g1/b'] } });
    expect(trace.latestRevision).toBe(1);
    expect(trace.uses).toEqual([
      {
        updateId: 'solver.v1.x',
        policyId: 'solver',
        versionBefore: 0,
        versionAfter: 1,
        committedAtMs: T0 + 1,
        groupId: 'g1',
        groupSource: { topic: 'srpo.advantage-groups', partition: 2, offset: 41 },
        setId: 'g1/b',
        advantage: -0.5,
        outcome: used,
        revision: 0,
        superseded: true,
      },
    ]);
    // With only the revision it used in the log, nothing is superseded.
    const current = await svc.traceEpisode('ep-g1/b', { events: { outcomes: outcomes.slice(0, 1), transitionIds: ['g1/b'] } });
    expect(current.uses.map((u) => [u.revision, u.superseded])).toEqual([[0, false]]);
    // An outcome no longer in the log: the revision cannot be told.
    const gone = await svc.traceEpisode('ep-g1/b', { events: { outcomes: outcomes.slice(1), transitionIds: ['g1/b'] } });
    expect(gone.uses.map((u) => [u.revision, u.superseded])).toEqual([[null, null]]);
    await expect(svc.traceEpisode('nobody', { events: { outcomes: [], transitionIds: [] } })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    await expect(svc.traceEpisode('ep-g1/b', { topics: { transitions: 't', episodeOutcomes: 'o' } })).rejects.toThrow(/no Kafka client/);
  });

  it('reports a failed source check, not a crash, when the events cannot be fetched', async () => {
    const report = await new AuditService({ store, backend: 'cpu' }).verify('solver.v1.x');
    expect(report.ok).toBe(false);
    expect(report.checks.map((c) => [c.name, c.ok])).toEqual([
      ['record', true],
      ['source-events', false],
    ]);
    expect(report.failure).toBe('source-events: no Kafka connection configured: source events cannot be fetched');
    expect(report.recomputedWeightsHashAfter).toBeUndefined();
  });

  it('fails the record check, naming the field, when a recorded hyperparameter is wrong (the reader is tested in libs/trainer)', async () => {
    const { groups: _groups, createdAt: _createdAt, ...base } = await store.getUpdate('solver.v1.x');
    const bad = await store.recordUpdate(
      {
        ...base,
        updateId: 'solver.v2.x',
        versionBefore: 1,
        versionAfter: 2,
        weightsHashBefore: HASH_1,
        hyperparameters: { ...base.hyperparameters, lr: 'fast' },
        committedAtMs: T0 + 2,
      },
      [
        ledgerEntryFromGroup(advantageGroup('g2', [{ set: activeSet('g2/a', [member({ outputId: 'o4', logpOld: [-1, -1, -1] })]), advantage: 1 }]), {
          topic: 'srpo.advantage-groups',
          partition: 2,
          offset: 42,
        }),
      ],
    );
    const report = await new AuditService({ store, backend: 'cpu' }).verify(bad.updateId);
    expect(report.ok).toBe(false);
    expect(report.checks).toEqual([{ name: 'record', ok: false, detail: 'hyperparameters.lr must be a finite number >= 0, recorded "fast"' }]);
  });
});
