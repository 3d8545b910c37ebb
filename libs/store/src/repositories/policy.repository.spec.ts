import type { DataSource } from 'typeorm';
import { Logger } from '@srpo/core';
import { expectInvalid, HASH_0, openMemoryRepositories, seedPolicy, T0 } from '../../test/audit-fixtures';
import { PolicyEntity } from '../entities';
import { PolicyRepository } from './policy.repository';
import type { StoreRepositories } from './store-repositories';

Logger.configure({ level: 'warn' });

describe('PolicyRepository validation and mapping', () => {
  it('takes a policy id of 1 to 200 characters and roles as non-empty strings', () => {
    expect(() => PolicyRepository.validate('solver', ['solver', 'critic'])).not.toThrow();
    expect(() => PolicyRepository.validate('p'.repeat(200), [])).not.toThrow();
    expectInvalid(() => PolicyRepository.validate('', ['solver']), 'policyId', /must be a non-empty string/);
    expectInvalid(() => PolicyRepository.validate('p'.repeat(201), ['solver']), 'policyId', /at most 200 characters, got 201/);
    expectInvalid(() => PolicyRepository.validate('solver', ['solver', '']), 'roles', /array of non-empty strings/);
    expectInvalid(() => PolicyRepository.validate('solver', 'solver' as unknown as string[]), 'roles', /array of non-empty strings/);
  });

  it('starts a policy at its initial version with a copy of the roles', () => {
    const roles = ['solver'];
    const p = PolicyRepository.fromInput('solver', roles, { version: 3, weightsHash: HASH_0, checkpointUri: 'file:///v3', createdAtMs: T0 });
    roles.push('later');
    expect(p).toEqual({ policyId: 'solver', roles: ['solver'], currentVersion: 3, createdAtMs: T0 });
  });

  it('maps a row to a plain record and back', () => {
    const row = Object.assign(new PolicyEntity(), { policyId: 'solver', roles: ['a', 'b'], currentVersion: 2, createdAtMs: T0 });
    const record = PolicyRepository.fromRow(row);
    expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
    expect(record).toEqual({ policyId: 'solver', roles: ['a', 'b'], currentVersion: 2, createdAtMs: T0 });
    expect(PolicyRepository.toRow(record)).toEqual(record);
  });
});

describe('PolicyRepository on SQLite', () => {
  let dataSource: DataSource;
  let repos: StoreRepositories;

  beforeEach(async () => {
    ({ dataSource, repos } = await openMemoryRepositories());
    await seedPolicy(repos, 'solver');
  });

  afterEach(async () => {
    await dataSource.destroy();
  });

  it('reads policies back by id and lists them in id order', async () => {
    await seedPolicy(repos, 'critic');
    expect(await repos.policies.get('solver')).toEqual({ policyId: 'solver', roles: ['solver'], currentVersion: 0, createdAtMs: T0 });
    expect(await repos.policies.get('nobody')).toBeUndefined();
    expect((await repos.policies.list()).map((p) => p.policyId)).toEqual(['critic', 'solver']);
  });

  it('advances the current version only from the expected one', async () => {
    expect(await repos.policies.advanceVersion('solver', 0, 1)).toBe(true);
    // A second writer that also started from 0 loses, and changes nothing.
    expect(await repos.policies.advanceVersion('solver', 0, 1)).toBe(false);
    expect(await repos.policies.advanceVersion('nobody', 0, 1)).toBe(false);
    expect((await repos.policies.get('solver'))?.currentVersion).toBe(1);
  });
});
