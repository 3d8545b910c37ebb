import type { DataSource } from 'typeorm';
import { ValidationError } from '@srpo/core';
import type { GroupLedgerInput, GroupStatsInput, SkippedGroupInput, UpdateRecordInput } from '../src/audit-types';
import { createDataSource } from '../src/data-source';
import { storeRepositories, type StoreRepositories } from '../src/repositories';

/** Valid inputs for the repositories' specs; each test overrides what it checks. */

export const HASH_0 = '0'.repeat(64);
export const HASH_1 = '1'.repeat(64);
export const T0 = 1_767_225_600_000;

export function groupInput(id: string, offset: number, overrides: Partial<GroupLedgerInput> = {}): GroupLedgerInput {
  return {
    groupId: id,
    groupKey: `task/${id}`,
    source: { topic: 'srpo.advantage-groups', partition: 1, offset },
    setIds: [`${id}/s0`, `${id}/s1`],
    advantages: [0.5, -0.5],
    sources: [0, 1].map((j) => ({
      setId: `${id}/s${j}`,
      set: { topic: 'srpo.active-sets', partition: 2, offset: 10 * offset + j },
      transition: { topic: 'srpo.transitions', partition: 3, offset: 20 * offset + j },
      outcome: j === 0 ? { topic: 'srpo.episode-outcomes', partition: 3, offset: 30 * offset } : null,
      members: [{ outputId: `${id}/s${j}/o0`, source: { topic: 'srpo.agent-outputs', partition: 3, offset: 2 ** 40 + j } }],
    })),
    objectiveConfig: '{"advantageStd":"sample"}',
    ...overrides,
  };
}

export function recordInput(policyId: string, before: number, committedAtMs: number, overrides: Partial<UpdateRecordInput> = {}): UpdateRecordInput {
  return {
    updateId: `${policyId}.v${before + 1}`,
    policyId,
    versionBefore: before,
    versionAfter: before + 1,
    weightsHashBefore: HASH_0,
    weightsHashAfter: HASH_1,
    hyperparameters: { lr: 3e-4, objective: { objective: 'srpo' } },
    seed: 4_294_967_295,
    backend: 'tensorflow',
    codeVersion: 'srpo-kafka@0.1.0',
    loss: -0.125,
    gradNorm: 0.5,
    diagnostics: { 'losses/loss': -0.125, 'ratio/mean_k3': Number.NaN, 'ratio/max': Number.POSITIVE_INFINITY },
    wallTimeMs: 42,
    checkpointUri: `file:///ckpt/${policyId}/v${before + 1}`,
    committedAtMs,
    ...overrides,
  };
}

export function statsInput(groupId: string, overrides: Partial<GroupStatsInput> = {}): GroupStatsInput {
  return {
    groupId,
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

export function skippedInput(policyId: string, groupId: string, overrides: Partial<SkippedGroupInput> = {}): SkippedGroupInput {
  return {
    policyId,
    groupId,
    reason: 'stale',
    detail: 'member o1 at version 0, current 9',
    lag: 9,
    policyVersion: 9,
    source: { topic: 'srpo.advantage-groups', partition: 2, offset: 2 ** 35 },
    createdAtMs: T0,
    ...overrides,
  };
}

/** A migrated in-memory SQLite store and its repositories (no AuditStore facade in between). */
export async function openMemoryRepositories(): Promise<{ dataSource: DataSource; repos: StoreRepositories }> {
  const dataSource = createDataSource({ kind: 'sqlite', path: ':memory:' });
  await dataSource.initialize();
  return { dataSource, repos: storeRepositories(dataSource.manager) };
}

/** Registers `policyId` at version 0, as AuditStore.ensurePolicy does. */
export async function seedPolicy(repos: StoreRepositories, policyId: string): Promise<void> {
  await repos.policies.insert({ policyId, roles: ['solver'], currentVersion: 0, createdAtMs: T0 });
  await repos.versions.insert({ policyId, version: 0, weightsHash: HASH_0, checkpointUri: `file:///ckpt/${policyId}/v0`, updateId: null, createdAtMs: T0 });
}

/** Expects `fn` to throw a ValidationError on `field` whose message matches `message`. */
export function expectInvalid(fn: () => unknown, field: string, message: RegExp): void {
  let thrown: unknown;
  try {
    fn();
  } catch (e) {
    thrown = e;
  }
  expect(thrown).toBeInstanceOf(ValidationError);
  expect((thrown as ValidationError).field).toBe(field);
  expect((thrown as ValidationError).message).toMatch(message);
}
