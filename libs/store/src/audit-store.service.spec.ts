import { ErrorCode, Logger, SrpoError, ValidationError } from '@srpo/core';
import { EventCodec, sampleEvents, type AdvantageGroup } from '@srpo/events';
import { createStoreTarget, STORE_KINDS, type StoreTarget } from '../test/store-targets';
import type { GroupLedgerInput, GroupStatsInput, UpdateRecordInput } from './audit-types';
import { AuditStore } from './audit-store.service';
import { KeyStore } from './key-store.service';
import { ledgerEntryFromGroup } from './ledger-entry';
import { groupStatsFromGroup } from './group-stats';
import { AUDIT_APPEND_ONLY_TABLES } from './migrations';

Logger.configure({ level: 'warn' });

const HASH_0 = '0'.repeat(64);
const HASH_1 = '1'.repeat(64);
const HASH_2 = '2'.repeat(64);
const T0 = 1_767_225_600_000;

function group(id: string, offset: number): GroupLedgerInput {
  return {
    groupId: id,
    groupKey: `task/${id}`,
    source: { topic: 'srpo.advantage-groups', partition: 1, offset },
    setIds: [`${id}/s0`, `${id}/s1`],
    advantages: [0.7071067811865475, -0.7071067811865475],
    sources: [0, 1].map((j) => ({
      setId: `${id}/s${j}`,
      set: { topic: 'srpo.active-sets', partition: 2, offset: 100 * offset + j },
      transition: { topic: 'srpo.transitions', partition: 3, offset: 200 * offset + j },
      outcome: j === 0 ? { topic: 'srpo.episode-outcomes', partition: 3, offset: 300 * offset } : null,
      members: [
        { outputId: `${id}/s${j}/o0`, source: { topic: 'srpo.agent-outputs', partition: 3, offset: 400 * offset + 2 * j } },
        // An offset beyond 2^32: bigint columns must keep it exact.
        { outputId: `${id}/s${j}/o1`, source: { topic: 'srpo.agent-outputs', partition: 3, offset: 2 ** 40 + j } },
      ],
    })),
    objectiveConfig: '{"advantageStd":"sample","advantageEps":1e-6}',
  };
}

function stats(id: string, overrides: Partial<GroupStatsInput> = {}): GroupStatsInput {
  return {
    groupId: id,
    workflowKind: 'JOINT',
    setCount: 2,
    memberCount: 4,
    rewardMean: 0.25,
    successCount: 1,
    successKnown: 2,
    lagMax: 3,
    lagMean: 1.5,
    fillLatencyMs: 1234,
    groupEventTimeMs: T0 - 5,
    ...overrides,
  };
}

function record(policyId: string, before: number, committedAtMs: number, overrides: Partial<UpdateRecordInput> = {}): UpdateRecordInput {
  return {
    updateId: `${policyId}.v${before + 1}`,
    policyId,
    versionBefore: before,
    versionAfter: before + 1,
    weightsHashBefore: before === 0 ? HASH_0 : HASH_1,
    weightsHashAfter: before === 0 ? HASH_1 : HASH_2,
    hyperparameters: { objective: { objective: 'srpo', clipLow: 0.2, clipHigh: 0.28 }, lr: 3e-4, epochs: 1 },
    seed: 4_294_967_295,
    backend: 'tensorflow',
    codeVersion: 'srpo-kafka@0.1.0',
    loss: -0.125,
    gradNorm: 0.5,
    // NaN is a legitimate diagnostic (a statistic over zero units); it must survive.
    diagnostics: { 'losses/loss': -0.125, 'ratio/mean': 1, 'ratio/mean_k3': Number.NaN, 'ratio/max': Number.POSITIVE_INFINITY },
    wallTimeMs: 42,
    checkpointUri: `file:///ckpt/${policyId}/v${before + 1}`,
    committedAtMs,
    ...overrides,
  };
}

async function expectSrpoError(p: Promise<unknown>, code: ErrorCode, message?: RegExp): Promise<SrpoError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(SrpoError);
  expect((e as SrpoError).code).toBe(code);
  if (message) expect((e as SrpoError).message).toMatch(message);
  return e as SrpoError;
}

describe.each(STORE_KINDS)('AuditStore on %s', (kind) => {
  let target: StoreTarget;
  let store: AuditStore;

  beforeEach(async () => {
    target = await createStoreTarget(kind, 'audit');
    store = await AuditStore.open(target.config);
    await store.ensurePolicy('solver', ['solver', 'critic'], { version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/solver/v0', createdAtMs: T0 });
  });

  afterEach(async () => {
    await store.close();
    await target.dispose();
  });

  it('runs the migrations up, down and up again', async () => {
    const qr = store.dataSource.createQueryRunner();
    try {
      const tables = [
        'policies',
        'policy_versions',
        'update_records',
        'update_groups',
        'skipped_groups',
        'update_group_stats',
        'subject_keys',
        'erasures',
        'signing_keys',
      ];
      for (const t of tables) expect(await qr.hasTable(t)).toBe(true);
      await store.dataSource.undoLastMigration();
      expect(await qr.hasTable('subject_keys')).toBe(false);
      expect(await qr.hasTable('erasures')).toBe(false);
      expect(await qr.hasTable('signing_keys')).toBe(false);
      expect(await qr.hasTable('update_group_stats')).toBe(true);
      await store.dataSource.undoLastMigration();
      expect(await qr.hasTable('update_group_stats')).toBe(false);
      expect(await qr.hasTable('update_groups')).toBe(true);
      await store.dataSource.undoLastMigration();
      await store.dataSource.undoLastMigration();
      for (const t of tables) expect(await qr.hasTable(t)).toBe(false);
      const executed = await store.dataSource.query<unknown[]>(`SELECT * FROM ${target.table('migrations')}`);
      expect(executed).toHaveLength(0);
      const ran = await store.dataSource.runMigrations();
      expect(ran.map((m) => m.name)).toEqual([
        'InitialSchema1767225600000',
        'AppendOnlyGuards1767225600001',
        'GroupStats1767225600002',
        'SubjectKeys1767225600003',
      ]);
      for (const t of tables) expect(await qr.hasTable(t)).toBe(true);
    } finally {
      await qr.release();
    }
    // The guards came back with the second up.
    await store.ensurePolicy('solver', ['solver'], { version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/solver/v0', createdAtMs: T0 });
    await store.recordUpdate(record('solver', 0, T0 + 1), [group('g1', 1)], [stats('g1')]);
    await expect(store.dataSource.query(`UPDATE ${target.table('update_records')} SET loss = 0`)).rejects.toThrow(/append-only/);
    await expect(store.dataSource.query(`DELETE FROM ${target.table('update_group_stats')}`)).rejects.toThrow(/update_group_stats is append-only/);
  });

  it('registers a policy once, with its initial version', async () => {
    const again = await store.ensurePolicy('solver', ['other'], { version: 0, weightsHash: HASH_1, checkpointUri: 'file:///elsewhere', createdAtMs: T0 + 5 });
    expect(again).toEqual({ policyId: 'solver', roles: ['solver', 'critic'], currentVersion: 0, createdAtMs: T0 });
    expect(await store.listPolicies()).toEqual([again]);
    expect(await store.listVersions('solver')).toEqual([
      { policyId: 'solver', version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/solver/v0', updateId: null, createdAtMs: T0 },
    ]);
  });

  it('records an update with its groups and reads back exactly what was written', async () => {
    const input = record('solver', 0, T0 + 1000);
    const groups = [group('g1', 7), group('g2', 8)];
    const written = await store.recordUpdate(input, groups);
    const read = await store.getUpdate(input.updateId);
    expect(read).toEqual(written);
    // Checked against the inputs, not only against what recordUpdate returned.
    expect(read).toMatchObject({ ...input, diagnostics: expect.any(Object) });
    expect(read.createdAt).toBe('2026-01-01T00:00:01.000Z');
    expect(Number.isNaN(read.diagnostics['ratio/mean_k3'])).toBe(true);
    expect(read.diagnostics['ratio/max']).toBe(Number.POSITIVE_INFINITY);
    expect(read.diagnostics['losses/loss']).toBe(-0.125);
    expect(read.seed).toBe(4_294_967_295);
    expect(read.groups.map((g) => [g.groupId, g.position, g.updateId, g.policyId, g.createdAtMs])).toEqual([
      ['g1', 0, input.updateId, 'solver', T0 + 1000],
      ['g2', 1, input.updateId, 'solver', T0 + 1000],
    ]);
    expect(read.groups[0]).toMatchObject(groups[0]);
    expect(read.groups[1].sources[1].members[1].source.offset).toBe(2 ** 40 + 1);
    expect(read.groups[0].sources[1].outcome).toBeNull();

    expect((await store.getPolicy('solver'))?.currentVersion).toBe(1);
    expect(await store.listVersions('solver')).toEqual([
      { policyId: 'solver', version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/solver/v0', updateId: null, createdAtMs: T0 },
      { policyId: 'solver', version: 1, weightsHash: HASH_1, checkpointUri: input.checkpointUri, updateId: input.updateId, createdAtMs: T0 + 1000 },
    ]);
    expect(await store.latestUpdate('solver')).toEqual({ ...input, createdAt: read.createdAt });
    expect([...(await store.isGroupApplied('solver', ['g1', 'g2', 'g3']))].sort()).toEqual(['g1', 'g2']);
    expect((await store.isGroupApplied('other-policy', ['g1'])).size).toBe(0);
  });

  it('refuses a group that is already in the ledger and writes nothing of that update', async () => {
    await store.recordUpdate(record('solver', 0, T0 + 1), [group('g1', 1)]);
    const second = record('solver', 1, T0 + 2);
    const err = await expectSrpoError(store.recordUpdate(second, [group('g2', 2), group('g1', 1)]), ErrorCode.CONFLICT, /g1/);
    expect(err.details).toEqual({ groupIds: ['g1'] });
    await expectSrpoError(store.getUpdate(second.updateId), ErrorCode.NOT_FOUND);
    expect((await store.isGroupApplied('solver', ['g2'])).size).toBe(0);
    expect((await store.getPolicy('solver'))?.currentVersion).toBe(1);
    expect((await store.listVersions('solver')).map((v) => v.version)).toEqual([0, 1]);
    expect((await store.listUpdates({ policyId: 'solver' })).map((u) => u.updateId)).toEqual(['solver.v1']);
  });

  it('refuses an update that does not start from the current version (another learner got there first)', async () => {
    await store.recordUpdate(record('solver', 0, T0 + 1), [group('g1', 1)]);
    await expectSrpoError(store.recordUpdate(record('solver', 0, T0 + 2, { updateId: 'racer' }), [group('g9', 9)]), ErrorCode.CONFLICT, /version 1/);
    expect((await store.isGroupApplied('solver', ['g9'])).size).toBe(0);
  });

  it('records an adoption with no group only when it names its lineage, and only from the current version', async () => {
    await store.recordUpdate(record('solver', 0, T0 + 1), [group('g1', 1)]);
    const plain = record('solver', 1, T0 + 2, { updateId: 'adopt-1' });
    await expectSrpoError(store.recordAdoption(plain), ErrorCode.VALIDATION_FAILED, /hyperparameters\.adoption/);
    await expectSrpoError(store.recordUpdate(plain, []), ErrorCode.VALIDATION_FAILED, /at least one group/);
    const adoption = { ...plain, hyperparameters: { ...plain.hyperparameters, adoption: { run: 'erase-er-1', sourceVersion: 3 } } };
    await expectSrpoError(store.recordAdoption({ ...adoption, versionBefore: 0, versionAfter: 1 }), ErrorCode.CONFLICT, /version 1/);
    const written = await store.recordAdoption(adoption);
    expect(written.groups).toEqual([]);
    expect(await store.getUpdate('adopt-1')).toMatchObject({ versionBefore: 1, versionAfter: 2, hyperparameters: adoption.hyperparameters, groups: [] });
    expect((await store.getPolicy('solver'))?.currentVersion).toBe(2);
  });

  it('lets exactly one of two concurrent updates from the same version commit', async () => {
    const a = record('solver', 0, T0 + 1, { updateId: 'racer-a' });
    const b = record('solver', 0, T0 + 1, { updateId: 'racer-b' });
    const results = await Promise.allSettled([store.recordUpdate(a, [group('ga', 1)]), store.recordUpdate(b, [group('gb', 2)]), store.listUpdates({})]);
    const [ra, rb] = results;
    const fulfilled = [ra, rb].filter((r) => r.status === 'fulfilled');
    const rejected = [ra, rb].filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(fulfilled).toHaveLength(1);
    expect(rejected).toHaveLength(1);
    expect(rejected[0].reason).toBeInstanceOf(SrpoError);
    expect((rejected[0].reason as SrpoError).code).toBe(ErrorCode.CONFLICT);
    // A read racing the writes never sees a half-written update.
    const listed = results[2];
    expect(listed.status).toBe('fulfilled');
    for (const u of (listed as PromiseFulfilledResult<Awaited<ReturnType<AuditStore['listUpdates']>>>).value) expect(u.versionAfter).toBe(1);
    const winner = ra.status === 'fulfilled' ? 'racer-a' : 'racer-b';
    const loserGroup = winner === 'racer-a' ? 'gb' : 'ga';
    expect((await store.listUpdates({})).map((u) => u.updateId)).toEqual([winner]);
    expect((await store.isGroupApplied('solver', [loserGroup])).size).toBe(0);
    expect((await store.getUpdate(winner)).groups).toHaveLength(1);
    expect((await store.listVersions('solver')).map((v) => [v.version, v.updateId])).toEqual([
      [0, null],
      [1, winner],
    ]);
  });

  it('validates the record before touching the database', async () => {
    const bad = record('solver', 0, T0, { versionAfter: 5 });
    const e = await store.recordUpdate(bad, [group('g1', 1)]).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ValidationError);
    expect((e as ValidationError).field).toBe('record.versionAfter');
    await expect(store.recordUpdate(record('solver', 0, T0, { loss: Number.NaN }), [group('g1', 1)])).rejects.toThrow(/record\.loss: must be a finite number/);
    await expect(store.recordUpdate(record('solver', 0, T0), [group('g1', 1), group('g1', 1)])).rejects.toThrow(/appears twice/);
    expect((await store.getPolicy('solver'))?.currentVersion).toBe(0);
  });

  it('refuses UPDATE and DELETE of audit rows at the database level', async () => {
    await store.recordUpdate(record('solver', 0, T0 + 1), [group('g1', 1)], [stats('g1')]);
    await store.recordSkipped([
      {
        policyId: 'solver',
        groupId: 'old',
        reason: 'stale',
        detail: null,
        lag: 9,
        policyVersion: 1,
        source: { topic: 't', partition: 0, offset: 3 },
        createdAtMs: T0,
      },
    ]);
    await new KeyStore(store.dataSource).erase({ subjectId: 'u1' }, 'er-1', T0);
    const timeColumn: Record<string, string> = { update_records: 'committed_at_ms', erasures: 'erased_at_ms' };
    for (const t of AUDIT_APPEND_ONLY_TABLES) {
      const column = timeColumn[t] ?? 'created_at_ms';
      await expect(store.dataSource.query(`UPDATE ${target.table(t)} SET ${column} = 0`)).rejects.toThrow(new RegExp(`${t} is append-only: UPDATE refused`));
      await expect(store.dataSource.query(`DELETE FROM ${target.table(t)}`)).rejects.toThrow(new RegExp(`${t} is append-only: DELETE refused`));
    }
    if (kind === 'postgres') {
      await expect(store.dataSource.query(`TRUNCATE ${target.table('update_records')} CASCADE`)).rejects.toThrow(/append-only: TRUNCATE refused/);
    }
    if (kind === 'postgres') {
      await expect(store.dataSource.query(`TRUNCATE ${target.table('update_group_stats')}`)).rejects.toThrow(/append-only: TRUNCATE refused/);
    }
    expect(await store.listGroupStats()).toHaveLength(1);
    const after = await store.getUpdate('solver.v1');
    expect(after.loss).toBe(-0.125);
    expect(after.groups).toHaveLength(1);
    expect(await store.listSkipped('solver')).toHaveLength(1);
  });

  it('records group statistics with their update and lists them by policy and time', async () => {
    await store.ensurePolicy('critic', ['critic'], { version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/critic/v0', createdAtMs: T0 });
    await store.recordUpdate(
      record('solver', 0, T0 + 1000),
      [group('a1', 1), group('a2', 2)],
      [stats('a1'), stats('a2', { workflowKind: null, fillLatencyMs: -7 })],
    );
    await store.recordUpdate(record('critic', 0, T0 + 2000), [group('b1', 3)], [stats('b1', { lagMax: 0, lagMean: 0 })]);
    // Without statistics (a replay run's store): the update is recorded, no stats row.
    await store.recordUpdate(record('solver', 1, T0 + 3000), [group('a3', 4)]);
    const all = await store.listGroupStats();
    expect(all.map((s) => [s.policyId, s.groupId, s.updateId, s.versionAfter, s.createdAtMs])).toEqual([
      ['solver', 'a1', 'solver.v1', 1, T0 + 1000],
      ['solver', 'a2', 'solver.v1', 1, T0 + 1000],
      ['critic', 'b1', 'critic.v1', 1, T0 + 2000],
    ]);
    expect(all[0]).toEqual({ ...stats('a1'), policyId: 'solver', updateId: 'solver.v1', versionAfter: 1, createdAtMs: T0 + 1000 });
    expect(all[1].workflowKind).toBeNull();
    expect(all[1].fillLatencyMs).toBe(-7);
    expect((await store.listGroupStats({ policyId: 'critic' })).map((s) => s.groupId)).toEqual(['b1']);
    expect((await store.listGroupStats({ from: T0 + 1001 })).map((s) => s.groupId)).toEqual(['b1']);
    expect((await store.listGroupStats({ to: T0 + 2000 })).map((s) => s.groupId)).toEqual(['a1', 'a2']);
    expect((await store.listGroupStats({ limit: 1 })).map((s) => s.groupId)).toEqual(['a1']);
    await expect(store.listGroupStats({ limit: 0 })).rejects.toThrow(/limit: must be an integer in \[1, 20000\]/);
  });

  it('refuses statistics that do not belong to the update, and then records nothing', async () => {
    await expect(store.recordUpdate(record('solver', 0, T0), [group('g1', 1)], [stats('other')])).rejects.toThrow(
      /stats\[0\]\.groupId: other is not one of the update's groups/,
    );
    await expect(store.recordUpdate(record('solver', 0, T0), [group('g1', 1)], [stats('g1'), stats('g1')])).rejects.toThrow(/appears twice/);
    await expect(store.recordUpdate(record('solver', 0, T0), [group('g1', 1)], [stats('g1', { successCount: 3 })])).rejects.toThrow(
      /successCount: must not exceed/,
    );
    await expect(store.recordUpdate(record('solver', 0, T0), [group('g1', 1)], [stats('g1', { rewardMean: Number.NaN })])).rejects.toThrow(
      /rewardMean: must be a finite number/,
    );
    expect(await store.listUpdates()).toEqual([]);
    expect(await store.listGroupStats()).toEqual([]);
  });

  it('filters updates by policy and by a half-open time range', async () => {
    await store.ensurePolicy('critic', ['critic'], { version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/critic/v0', createdAtMs: T0 });
    await store.recordUpdate(record('solver', 0, T0 + 1000), [group('a1', 1)]);
    await store.recordUpdate(record('solver', 1, T0 + 2000), [group('a2', 2)]);
    await store.recordUpdate(record('critic', 0, T0 + 2000), [group('b1', 3)]);
    await store.recordUpdate(record('solver', 2, T0 + 3000, { weightsHashBefore: HASH_2, weightsHashAfter: HASH_1 }), [group('a3', 4)]);
    const ids = async (q: Parameters<AuditStore['listUpdates']>[0]) => (await store.listUpdates(q)).map((u) => u.updateId);
    expect(await ids({})).toEqual(['solver.v1', 'critic.v1', 'solver.v2', 'solver.v3']);
    expect(await ids({ policyId: 'solver' })).toEqual(['solver.v1', 'solver.v2', 'solver.v3']);
    expect(await ids({ from: T0 + 2000 })).toEqual(['critic.v1', 'solver.v2', 'solver.v3']);
    expect(await ids({ to: T0 + 2000 })).toEqual(['solver.v1']);
    expect(await ids({ policyId: 'solver', from: T0 + 1500, to: T0 + 3000 })).toEqual(['solver.v2']);
    expect(await ids({ limit: 2 })).toEqual(['solver.v1', 'critic.v1']);
    expect(await ids({ policyId: 'nobody' })).toEqual([]);
    await expect(store.listUpdates({ limit: 0 })).rejects.toThrow(/limit: must be an integer in \[1, 1000\]/);
    expect((await store.latestUpdate('solver'))?.updateId).toBe('solver.v3');
    expect(await store.latestUpdate('nobody')).toBeUndefined();
  });

  it('records skipped groups once and never lets a skipped group into an update', async () => {
    const entry = {
      policyId: 'solver',
      groupId: 'late',
      reason: 'stale',
      detail: 'member o1 at version 0, current 9, max lag 4',
      lag: 9,
      policyVersion: 9,
      source: { topic: 'srpo.advantage-groups', partition: 2, offset: 2 ** 35 },
      createdAtMs: T0 + 7,
    };
    expect(await store.recordSkipped([entry])).toEqual([entry]);
    expect(await store.recordSkipped([entry, { ...entry, groupId: 'late2' }])).toEqual([{ ...entry, groupId: 'late2' }]);
    expect(await store.listSkipped('solver')).toEqual([entry, { ...entry, groupId: 'late2' }]);
    expect([...(await store.skippedGroupIds('solver', ['late', 'x']))]).toEqual(['late']);
    // An unknown policy is named, not left to the foreign key's INTEGRITY_FAILED; nothing is recorded.
    await expectSrpoError(store.recordSkipped([{ ...entry, policyId: 'nobody', groupId: 'z' }]), ErrorCode.NOT_FOUND, /policy nobody is not registered/);
    expect(await store.listSkipped('nobody')).toEqual([]);
    await expectSrpoError(store.recordUpdate(record('solver', 0, T0 + 8), [group('late', 1)]), ErrorCode.CONFLICT, /skipped/);
    expect((await store.getPolicy('solver'))?.currentVersion).toBe(0);
  });

  it('finds the ledger row of a set by exact set id, with LIKE wildcards taken literally', async () => {
    const odd = { ...group('g%_1', 1), setIds: ['a%b', 'a_b\\"c'] };
    odd.sources = odd.sources.map((src, i) => ({ ...src, setId: odd.setIds[i] }));
    await store.recordUpdate(record('solver', 0, T0 + 1), [group('g1', 2), odd]);
    expect((await store.findGroupsWithSet('g1/s1')).map((g) => [g.groupId, g.updateId, g.position])).toEqual([['g1', 'solver.v1', 0]]);
    expect((await store.findGroupsWithSet('a_b\\"c')).map((g) => g.groupId)).toEqual(['g%_1']);
    // '%' and '_' must not act as wildcards: 'axb' is no set, 'a%b' is exactly one.
    expect(await store.findGroupsWithSet('axb')).toEqual([]);
    expect((await store.findGroupsWithSet('a%b')).map((g) => g.groupId)).toEqual(['g%_1']);
    // A prefix of a set id is not that set.
    expect(await store.findGroupsWithSet('g1/s')).toEqual([]);
  });

  it('answers NOT_FOUND for unknown updates and policies', async () => {
    await expectSrpoError(store.getUpdate('nope'), ErrorCode.NOT_FOUND, /no update nope/);
    await expectSrpoError(store.listVersions('nope'), ErrorCode.NOT_FOUND, /no policy nope/);
    await expectSrpoError(store.recordUpdate(record('nope', 0, T0), [group('g1', 1)]), ErrorCode.NOT_FOUND);
  });

  it('builds ledger rows from an AdvantageGroup event with every source coordinate', async () => {
    const s = sampleEvents(2);
    const entry = ledgerEntryFromGroup(s.AdvantageGroup, { topic: 'srpo.advantage-groups', partition: 0, offset: 52 });
    expect(entry).toEqual({
      groupId: s.AdvantageGroup.groupId,
      groupKey: 'task-2/solve',
      source: { topic: 'srpo.advantage-groups', partition: 0, offset: 52 },
      setIds: ['ep-2/tr-0'],
      advantages: [0],
      sources: [
        {
          setId: 'ep-2/tr-0',
          set: { topic: 'srpo.active-sets', partition: 2, offset: 42 },
          transition: { topic: 'srpo.transitions', partition: 2, offset: 22 },
          outcome: { topic: 'srpo.episode-outcomes', partition: 2, offset: 32 },
          members: [{ outputId: 'ep-2/out-0', source: { topic: 'srpo.agent-outputs', partition: 2, offset: 12 } }],
        },
      ],
      objectiveConfig: s.AdvantageGroup.objectiveConfig,
    });
    await store.recordUpdate(record('solver', 0, T0), [entry]);
    expect((await store.getUpdate('solver.v1')).groups[0]).toMatchObject(entry);
  });
});

describe('groupStatsFromGroup', () => {
  const codec = new EventCodec();

  function sample(): AdvantageGroup {
    return sampleEvents(1).AdvantageGroup;
  }

  it('summarises reward, success, workflow, lag and fill latency from the group and its member outputs', () => {
    const g = sample();
    const base = g.sets[0];
    const member = base.set.members[0];
    const output = codec.decodeAs('AgentOutput', member.output);
    const second = {
      ...base,
      set: {
        ...base.set,
        setId: 'second',
        reward: 0,
        success: false,
        eventTimeMs: output.eventTimeMs + 50,
        members: [{ ...member, policyVersion: member.policyVersion + 1 }],
      },
    };
    const third = { ...base, set: { ...base.set, setId: 'third', reward: 0.5, success: null, members: [] } };
    const group: AdvantageGroup = { ...g, sets: [base, second, third], eventTimeMs: output.eventTimeMs + 1000 };
    const s = groupStatsFromGroup(group, member.policyVersion + 4, codec);
    expect(s).toEqual({
      groupId: g.groupId,
      workflowKind: base.set.workflowKind,
      setCount: 3,
      memberCount: base.set.members.length + 1,
      rewardMean: (base.set.reward + 0 + 0.5) / 3,
      successCount: base.set.success === true ? 1 : 0,
      successKnown: 2,
      lagMax: 4,
      lagMean: (4 * base.set.members.length + 3) / (base.set.members.length + 1),
      // The member output is older than every set event: it is where the group started filling.
      fillLatencyMs: 1000,
      groupEventTimeMs: output.eventTimeMs + 1000,
    });
  });

  it('has no workflow kind when the sets disagree', () => {
    const g = sample();
    const other = {
      ...g.sets[0],
      set: { ...g.sets[0].set, setId: 'x', workflowKind: g.sets[0].set.workflowKind === 'JOINT' ? 'FIXED' : 'JOINT' },
    } as AdvantageGroup['sets'][number];
    expect(groupStatsFromGroup({ ...g, sets: [g.sets[0], other] }, 10, codec).workflowKind).toBeNull();
  });
});
