import type { DataSource } from 'typeorm';
import { Logger } from '@srpo/core';
import { expectInvalid, openMemoryRepositories, seedPolicy, skippedInput, T0 } from '../../test/audit-fixtures';
import type { SkippedGroupInput } from '../audit-types';
import { isUniqueViolation } from '../store-errors';
import { SkippedGroupRepository } from './skipped-group.repository';
import type { StoreRepositories } from './store-repositories';

Logger.configure({ level: 'warn' });

describe('SkippedGroupRepository validation and mapping', () => {
  const invalid = (overrides: Partial<SkippedGroupInput>, field: string, message: RegExp) =>
    expectInvalid(() => SkippedGroupRepository.validate(skippedInput('solver', 'g', overrides), 'entries[2]'), field, message);

  it('accepts a null detail and lag, and a negative lag (a member from the future)', () => {
    for (const overrides of [{}, { detail: null, lag: null }, { lag: -3 }]) {
      expect(() => SkippedGroupRepository.validate(skippedInput('solver', 'g', overrides), 'entries[0]')).not.toThrow();
    }
  });

  it('names the entry and the field', () => {
    invalid({ policyId: '' }, 'entries[2].policyId', /non-empty string/);
    invalid({ groupId: 'g'.repeat(513) }, 'entries[2].groupId', /at most 512 characters/);
    invalid({ reason: 'r'.repeat(65) }, 'entries[2].reason', /at most 64 characters/);
    invalid({ detail: 3 as unknown as string }, 'entries[2].detail', /a string or null/);
    invalid({ lag: 0.5 }, 'entries[2].lag', /an integer or null, got 0.5/);
    invalid({ lag: 2 ** 31 }, 'entries[2].lag', /an integer or null/);
    invalid({ policyVersion: -1 }, 'entries[2].policyVersion', /non-negative 32-bit integer/);
    invalid({ source: { topic: 't', partition: 0, offset: -1 } }, 'entries[2].source.offset', /non-negative safe integer/);
    invalid({ createdAtMs: Number.NaN }, 'entries[2].createdAtMs', /epoch milliseconds/);
  });

  it('copies the input and stores the group coordinates as three columns', () => {
    const input = skippedInput('solver', 'g');
    const record = SkippedGroupRepository.fromInput(input);
    input.source.offset = 1;
    expect(record.source.offset).toBe(2 ** 35);
    const row = SkippedGroupRepository.toRow(record);
    expect([row.groupTopic, row.groupPartition, row.groupOffset]).toEqual(['srpo.advantage-groups', 2, 2 ** 35]);
    expect(SkippedGroupRepository.fromRow(row)).toEqual(record);
  });
});

describe('SkippedGroupRepository on SQLite', () => {
  let dataSource: DataSource;
  let repos: StoreRepositories;

  beforeEach(async () => {
    ({ dataSource, repos } = await openMemoryRepositories());
    await seedPolicy(repos, 'solver');
  });

  afterEach(async () => {
    await dataSource.destroy();
  });

  it('lists skipped groups oldest first (then by id) and answers which ids are skipped', async () => {
    for (const [id, at] of [
      ['b', T0 + 1],
      ['c', T0],
      ['a', T0 + 1],
    ] as const)
      await repos.skipped.insert(skippedInput('solver', id, { createdAtMs: at, detail: null }));
    expect((await repos.skipped.list('solver')).map((s) => s.groupId)).toEqual(['c', 'a', 'b']);
    expect((await repos.skipped.list('solver', 1)).map((s) => s.groupId)).toEqual(['c']);
    expect((await repos.skipped.list('solver'))[0]).toEqual(skippedInput('solver', 'c', { createdAtMs: T0, detail: null }));
    expect([...(await repos.skipped.skippedIn('solver', ['a', 'x', 'a']))]).toEqual(['a']);
    await expect(repos.skipped.list('solver', 1001)).rejects.toThrow(/limit: must be an integer in \[1, 1000\]/);
  });

  it('holds a group once per policy: a redelivered row is a unique violation', async () => {
    await repos.skipped.insert(skippedInput('solver', 'g'));
    expect(isUniqueViolation(await repos.skipped.insert(skippedInput('solver', 'g', { reason: 'other' })).catch((e: unknown) => e))).toBe(true);
  });
});
