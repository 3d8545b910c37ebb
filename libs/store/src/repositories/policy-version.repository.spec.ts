import type { DataSource } from 'typeorm';
import { Logger } from '@srpo/core';
import { expectInvalid, HASH_0, HASH_1, openMemoryRepositories, recordInput, seedPolicy, T0 } from '../../test/audit-fixtures';
import { isUniqueViolation } from '../store-errors';
import { PolicyVersionRepository } from './policy-version.repository';
import type { StoreRepositories } from './store-repositories';

Logger.configure({ level: 'warn' });

const INITIAL = { version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/v0', createdAtMs: T0 };

describe('PolicyVersionRepository validation and mapping', () => {
  it('checks the initial weights field by field', () => {
    expect(() => PolicyVersionRepository.validate(INITIAL)).not.toThrow();
    expectInvalid(() => PolicyVersionRepository.validate({ ...INITIAL, version: -1 }), 'initial.version', /non-negative 32-bit integer, got -1/);
    expectInvalid(() => PolicyVersionRepository.validate({ ...INITIAL, version: 2 ** 31 }), 'initial.version', /non-negative 32-bit integer/);
    expectInvalid(() => PolicyVersionRepository.validate({ ...INITIAL, weightsHash: 'A'.repeat(64) }), 'initial.weightsHash', /SHA-256 hex digest/);
    expectInvalid(() => PolicyVersionRepository.validate({ ...INITIAL, checkpointUri: '' }), 'initial.checkpointUri', /non-empty string/);
    expectInvalid(() => PolicyVersionRepository.validate({ ...INITIAL, createdAtMs: 1.5 }), 'initial.createdAtMs', /epoch milliseconds/);
  });

  it('derives the initial version (no update) and the version an update produced', () => {
    expect(PolicyVersionRepository.fromInitial('solver', INITIAL)).toEqual({ policyId: 'solver', ...INITIAL, updateId: null });
    expect(PolicyVersionRepository.fromUpdate(recordInput('solver', 4, T0 + 9))).toEqual({
      policyId: 'solver',
      version: 5,
      weightsHash: HASH_1,
      checkpointUri: 'file:///ckpt/solver/v5',
      updateId: 'solver.v5',
      createdAtMs: T0 + 9,
    });
  });

  it('maps rows to plain records with exactly the record fields', () => {
    const row = { ...PolicyVersionRepository.fromInitial('solver', INITIAL), extra: 1 };
    expect(PolicyVersionRepository.fromRow(row)).toEqual(PolicyVersionRepository.fromInitial('solver', INITIAL));
    expect(PolicyVersionRepository.toRow(PolicyVersionRepository.fromInitial('solver', INITIAL))).toEqual(
      PolicyVersionRepository.fromInitial('solver', INITIAL),
    );
  });
});

describe('PolicyVersionRepository on SQLite', () => {
  let dataSource: DataSource;
  let repos: StoreRepositories;

  beforeEach(async () => {
    ({ dataSource, repos } = await openMemoryRepositories());
    await seedPolicy(repos, 'solver');
  });

  afterEach(async () => {
    await dataSource.destroy();
  });

  it('lists versions ascending and reads one back', async () => {
    const record = recordInput('solver', 0, T0 + 1);
    await repos.updates.insert({ ...record, createdAt: new Date(record.committedAtMs).toISOString() });
    await repos.versions.insert(PolicyVersionRepository.fromUpdate(record));
    expect((await repos.versions.list('solver')).map((v) => [v.version, v.updateId])).toEqual([
      [0, null],
      [1, 'solver.v1'],
    ]);
    expect(await repos.versions.get('solver', 1)).toEqual(PolicyVersionRepository.fromUpdate(record));
    expect(await repos.versions.get('solver', 2)).toBeUndefined();
    expect(await repos.versions.list('nobody')).toEqual([]);
  });

  it('holds a version once: a second row for it is a unique violation', async () => {
    const e = await repos.versions.insert(PolicyVersionRepository.fromInitial('solver', { ...INITIAL, weightsHash: HASH_1 })).catch((x: unknown) => x);
    expect(isUniqueViolation(e)).toBe(true);
  });
});
