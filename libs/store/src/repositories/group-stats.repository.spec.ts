import type { DataSource } from 'typeorm';
import { Logger } from '@srpo/core';
import { expectInvalid, openMemoryRepositories, recordInput, seedPolicy, statsInput, T0 } from '../../test/audit-fixtures';
import type { GroupStatsInput } from '../audit-types';
import { GroupStatsRepository } from './group-stats.repository';
import type { StoreRepositories } from './store-repositories';
import { UpdateRecordRepository } from './update-record.repository';

Logger.configure({ level: 'warn' });

describe('GroupStatsRepository validation', () => {
  const invalid = (overrides: Partial<GroupStatsInput>, field: string, message: RegExp) =>
    expectInvalid(() => GroupStatsRepository.validate([statsInput('a'), statsInput('b', overrides)], ['a', 'b']), field, message);

  it('accepts no statistics, a null workflow kind, negative lags and latencies as measured', () => {
    expect(() => GroupStatsRepository.validate([], ['a'])).not.toThrow();
    expect(() => GroupStatsRepository.validate([statsInput('a', { workflowKind: null, lagMax: -2, fillLatencyMs: -7 })], ['a'])).not.toThrow();
  });

  it('takes statistics only for the update’s groups, once each', () => {
    expectInvalid(() => GroupStatsRepository.validate('x' as unknown as GroupStatsInput[], []), 'stats', /must be an array/);
    expectInvalid(() => GroupStatsRepository.validate([statsInput('other')], ['a']), 'stats[0].groupId', /other is not one of the update's groups/);
    expectInvalid(() => GroupStatsRepository.validate([statsInput('a'), statsInput('a')], ['a']), 'stats[1].groupId', /a appears twice/);
  });

  it('checks counts, their order and the numbers field by field', () => {
    invalid({ workflowKind: 'w'.repeat(33) }, 'stats[1].workflowKind', /at most 32 characters/);
    invalid({ setCount: -1 }, 'stats[1].setCount', /non-negative 32-bit integer/);
    invalid({ memberCount: 1.5 }, 'stats[1].memberCount', /non-negative 32-bit integer/);
    invalid({ successCount: 3 }, 'stats[1].successCount', /must not exceed successKnown \(2\)/);
    invalid({ successKnown: 3, successCount: 0 }, 'stats[1].successKnown', /must not exceed setCount \(2\)/);
    invalid({ rewardMean: Number.NaN }, 'stats[1].rewardMean', /finite number/);
    invalid({ lagMean: Number.NEGATIVE_INFINITY }, 'stats[1].lagMean', /finite number/);
    invalid({ lagMax: 0.5 }, 'stats[1].lagMax', /32-bit integer, got 0.5/);
    invalid({ fillLatencyMs: 2 ** 53 }, 'stats[1].fillLatencyMs', /must be an integer/);
    invalid({ groupEventTimeMs: -1 }, 'stats[1].groupEventTimeMs', /epoch milliseconds/);
  });

  it('checks list queries: limit in [1, 20000] (default 1000)', () => {
    expect(GroupStatsRepository.validateQuery({})).toBe(1000);
    expect(GroupStatsRepository.validateQuery({ limit: 20_000 })).toBe(20_000);
    expectInvalid(() => GroupStatsRepository.validateQuery({ limit: 20_001 }), 'limit', /must be an integer in \[1, 20000\], got 20001/);
    expectInvalid(() => GroupStatsRepository.validateQuery({ from: -1 }), 'from', /epoch milliseconds/);
  });
});

describe('GroupStatsRepository mapping', () => {
  it('stamps each group’s statistics with the update, its version and commit time', () => {
    const [s] = GroupStatsRepository.fromInput(recordInput('solver', 2, T0 + 3), [{ ...statsInput('a'), stray: 1 } as GroupStatsInput]);
    expect(s).toEqual({ ...statsInput('a'), policyId: 'solver', updateId: 'solver.v3', versionAfter: 3, createdAtMs: T0 + 3 });
    expect(GroupStatsRepository.fromRow(GroupStatsRepository.toRow(s))).toEqual(s);
  });
});

describe('GroupStatsRepository on SQLite', () => {
  let dataSource: DataSource;
  let repos: StoreRepositories;

  beforeEach(async () => {
    ({ dataSource, repos } = await openMemoryRepositories());
    await seedPolicy(repos, 'solver');
    await seedPolicy(repos, 'critic');
  });

  afterEach(async () => {
    await dataSource.destroy();
  });

  it('lists statistics by commit time, policy, version and group id, filtered and limited', async () => {
    // solver.v2 is committed before solver.v1 here: the order is by commit time, not version.
    for (const [policyId, before, at, ids] of [
      ['solver', 0, T0 + 2, ['z', 'b']],
      ['critic', 0, T0 + 2, ['c']],
      ['solver', 1, T0 + 1, ['a']],
    ] as const) {
      const record = recordInput(policyId, before, at);
      await repos.updates.insert(UpdateRecordRepository.fromInput(record));
      await repos.stats.insert(
        GroupStatsRepository.fromInput(
          record,
          ids.map((id) => statsInput(id)),
        ),
      );
    }
    await repos.stats.insert([]);
    expect((await repos.stats.list()).map((s) => s.groupId)).toEqual(['a', 'c', 'b', 'z']);
    expect((await repos.stats.list({ policyId: 'solver', from: T0 + 2 })).map((s) => s.groupId)).toEqual(['b', 'z']);
    expect((await repos.stats.list({ to: T0 + 2 })).map((s) => s.groupId)).toEqual(['a']);
    expect((await repos.stats.list({ limit: 2 })).map((s) => s.groupId)).toEqual(['a', 'c']);
    expect((await repos.stats.list({ policyId: 'solver', to: T0 + 2 }))[0]).toEqual({
      ...statsInput('a'),
      policyId: 'solver',
      updateId: 'solver.v2',
      versionAfter: 2,
      createdAtMs: T0 + 1,
    });
  });
});
