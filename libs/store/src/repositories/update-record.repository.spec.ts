import type { DataSource } from 'typeorm';
import { Logger } from '@srpo/core';
import { expectInvalid, openMemoryRepositories, recordInput, seedPolicy, T0 } from '../../test/audit-fixtures';
import type { UpdateRecordInput } from '../audit-types';
import type { StoreRepositories } from './store-repositories';
import { UpdateRecordRepository } from './update-record.repository';

Logger.configure({ level: 'warn' });

describe('UpdateRecordRepository validation', () => {
  const invalid = (overrides: Partial<UpdateRecordInput>, field: string, message: RegExp) =>
    expectInvalid(() => UpdateRecordRepository.validate(recordInput('solver', 0, T0, overrides)), field, message);

  it('accepts a complete record, NaN and infinite diagnostics included', () => {
    expect(() => UpdateRecordRepository.validate(recordInput('solver', 0, T0))).not.toThrow();
  });

  it('names the first offending field', () => {
    invalid({ updateId: '' }, 'record.updateId', /non-empty string/);
    invalid({ policyId: 'p'.repeat(201) }, 'record.policyId', /at most 200 characters/);
    invalid({ versionBefore: -1, versionAfter: 0 }, 'record.versionBefore', /non-negative 32-bit integer, got -1/);
    invalid({ versionAfter: 5 }, 'record.versionAfter', /must be versionBefore \+ 1 \(1\), got 5/);
    invalid({ weightsHashBefore: 'abc' }, 'record.weightsHashBefore', /SHA-256 hex digest/);
    invalid({ weightsHashAfter: 'F'.repeat(64) }, 'record.weightsHashAfter', /64 lowercase hex digits/);
    invalid({ hyperparameters: [] as unknown as UpdateRecordInput['hyperparameters'] }, 'record.hyperparameters', /must be an object/);
    invalid({ seed: 2 ** 53 }, 'record.seed', /must be a safe integer/);
    invalid({ backend: 'b'.repeat(65) }, 'record.backend', /at most 64 characters/);
    invalid({ codeVersion: '' }, 'record.codeVersion', /non-empty string/);
    invalid({ loss: Number.NaN }, 'record.loss', /must be a finite number, got NaN/);
    invalid({ gradNorm: Number.POSITIVE_INFINITY }, 'record.gradNorm', /must be a finite number, got Infinity/);
    invalid({ diagnostics: null as unknown as Record<string, number> }, 'record.diagnostics', /must be an object/);
    invalid({ diagnostics: { ok: 1, bad: '1' as unknown as number } }, 'record.diagnostics.bad', /must be a number, got string/);
    invalid({ wallTimeMs: 2 ** 31 }, 'record.wallTimeMs', /non-negative 32-bit integer/);
    invalid({ checkpointUri: '' }, 'record.checkpointUri', /non-empty string/);
    invalid({ committedAtMs: -1 }, 'record.committedAtMs', /epoch milliseconds/);
    // Past 8.64e15 ms a Date is invalid: refused here instead of a RangeError at insert.
    invalid({ committedAtMs: 8.64e15 + 1 }, 'record.committedAtMs', /at most 8640000000000000/);
  });

  it('checks list queries: limit in [1, 1000] (default 100) and epoch-ms bounds', () => {
    expect(UpdateRecordRepository.validateQuery({})).toBe(100);
    expect(UpdateRecordRepository.validateQuery({ limit: 1000, from: 0, to: T0 })).toBe(1000);
    expectInvalid(() => UpdateRecordRepository.validateQuery({ limit: 0 }), 'limit', /must be an integer in \[1, 1000\], got 0/);
    expectInvalid(() => UpdateRecordRepository.validateQuery({ limit: 1001 }), 'limit', /\[1, 1000\]/);
    expectInvalid(() => UpdateRecordRepository.validateQuery({ from: -5 }), 'from', /epoch milliseconds/);
    expectInvalid(() => UpdateRecordRepository.validateQuery({ to: 1.5 }), 'to', /epoch milliseconds/);
  });
});

describe('UpdateRecordRepository mapping', () => {
  it('stamps createdAt from the commit time and keeps only the record fields', () => {
    const input = { ...recordInput('solver', 0, T0), stray: 'not a column' } as UpdateRecordInput;
    const record = UpdateRecordRepository.fromInput(input);
    expect(record.createdAt).toBe('2026-01-01T00:00:00.000Z');
    expect(record).toEqual({ ...recordInput('solver', 0, T0), createdAt: '2026-01-01T00:00:00.000Z' });
    expect(UpdateRecordRepository.fromRow(UpdateRecordRepository.toRow(record))).toEqual(record);
  });
});

describe('UpdateRecordRepository on SQLite', () => {
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

  it('reads back exactly what was written: NaN and infinite diagnostics, a seed beyond 2^32', async () => {
    const record = UpdateRecordRepository.fromInput(recordInput('solver', 0, T0 + 1));
    await repos.updates.insert(record);
    const read = await repos.updates.get('solver.v1');
    expect(read).toEqual(record);
    expect(read?.diagnostics['ratio/mean_k3']).toBeNaN();
    expect(await repos.updates.get('nope')).toBeUndefined();
  });

  it('finds the latest update by version and lists by commit time, policy and version', async () => {
    for (const [policyId, before, at] of [
      ['solver', 0, T0 + 2000],
      ['solver', 1, T0 + 1000],
      ['critic', 0, T0 + 1000],
    ] as const) {
      await repos.updates.insert(UpdateRecordRepository.fromInput(recordInput(policyId, before, at)));
    }
    // The highest version, not the latest commit time.
    expect((await repos.updates.latest('solver'))?.updateId).toBe('solver.v2');
    expect(await repos.updates.latest('nobody')).toBeUndefined();
    expect((await repos.updates.list()).map((u) => u.updateId)).toEqual(['critic.v1', 'solver.v2', 'solver.v1']);
    expect((await repos.updates.list({ policyId: 'solver', to: T0 + 2000 })).map((u) => u.updateId)).toEqual(['solver.v2']);
    expect((await repos.updates.list({ from: T0 + 1001, limit: 1 })).map((u) => u.updateId)).toEqual(['solver.v1']);
    await expect(repos.updates.list({ limit: 0 })).rejects.toThrow(/limit: must be an integer/);
  });
});
