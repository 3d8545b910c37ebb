import { ErrorCode, SrpoError } from '@srpo/core';
import { weightsHash } from './checkpoint-store';
import { Policy } from './policy';
import { PolicyRegistry } from './policy-registry';
import { nativeBackend, TINY } from './test/fixtures';

function code(f: () => unknown): ErrorCode | undefined {
  try {
    f();
  } catch (e) {
    return e instanceof SrpoError ? e.code : undefined;
  }
  return undefined;
}

describe('PolicyRegistry', () => {
  beforeAll(nativeBackend);

  it('maps several roles to one shared policy and others to their own', () => {
    const reg = new PolicyRegistry();
    try {
      const shared = reg.create('shared', TINY, 1);
      const critic = reg.create('critic', TINY, 2);
      reg.share('shared', ['planner', 'coder']);
      reg.assignRole('reviewer', 'critic');
      expect(reg.forRole('planner')).toBe(shared);
      expect(reg.forRole('coder')).toBe(shared);
      expect(reg.forRole('reviewer')).toBe(critic);
      expect(reg.rolesOf('shared')).toEqual(['coder', 'planner']);
      expect(reg.roleMap()).toEqual({ coder: 'shared', planner: 'shared', reviewer: 'critic' });
      expect(reg.policies().map((p) => p.id)).toEqual(['critic', 'shared']);
      reg.assignRole('coder', 'critic');
      expect(reg.policyIdForRole('coder')).toBe('critic');
    } finally {
      reg.dispose();
    }
  });

  it('refuses unknown ids and roles, duplicate ids, and removing a policy in use', () => {
    const reg = new PolicyRegistry();
    try {
      reg.create('p', TINY, 1);
      expect(code(() => reg.create('p', TINY, 1))).toBe(ErrorCode.CONFLICT);
      expect(code(() => reg.get('nope'))).toBe(ErrorCode.NOT_FOUND);
      expect(code(() => reg.forRole('nobody'))).toBe(ErrorCode.NOT_FOUND);
      expect(code(() => reg.assignRole('r', 'nope'))).toBe(ErrorCode.NOT_FOUND);
      expect(code(() => reg.assignRole('', 'p'))).toBe(ErrorCode.VALIDATION_FAILED);
      reg.assignRole('r', 'p');
      expect(code(() => reg.remove('p'))).toBe(ErrorCode.CONFLICT);
      reg.assignRole('r', reg.create('q', TINY, 2).id);
      reg.remove('p');
      expect(reg.has('p')).toBe(false);
    } finally {
      reg.dispose();
    }
  });

  it('keeps versions monotonic: bumps go up, replacement by an older version is refused', async () => {
    const reg = new PolicyRegistry();
    try {
      const p = reg.create('p', TINY, 1);
      reg.assignRole('agent', 'p');
      expect(p.version).toBe(0);
      expect(p.bumpVersion()).toBe(1);
      expect(p.bumpVersion()).toBe(2);
      expect(code(() => p.advanceVersionTo(1))).toBe(ErrorCode.CONFLICT);
      const older = Policy.create('p', TINY, 9);
      expect(code(() => reg.replace(older))).toBe(ErrorCode.CONFLICT);
      older.dispose();
      const newer = Policy.create('p', TINY, 9);
      newer.advanceVersionTo(5);
      reg.replace(newer);
      expect(reg.forRole('agent')).toBe(newer);
      expect(reg.forRole('agent').version).toBe(5);
      expect(p.model.isDisposed).toBe(true);
      expect(await weightsHash(reg.get('p'))).toBe(await weightsHash(newer));
    } finally {
      reg.dispose();
    }
  });
});
