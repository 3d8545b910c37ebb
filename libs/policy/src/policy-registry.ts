import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { Policy } from './policy';
import type { TransformerConfig } from './transformer';

/**
 * The policies of a multi-agent system and which agent role uses which.
 *
 * Several roles may share one policy (their experience then trains the same
 * weights) or each role may have its own. Roles are mapped to policy ids, never
 * to objects, so replacing a policy (checkpoint restore) re-points every role at once.
 */
export class PolicyRegistry {
  private readonly byId = new Map<string, Policy>();
  private readonly roleToPolicy = new Map<string, string>();

  /** Creates, registers and returns a seeded policy. CONFLICT if the id is taken. */
  create(policyId: string, config: TransformerConfig, seed: number): Policy {
    if (this.byId.has(policyId)) throw conflict(`policy ${policyId} is already registered`, 'policyId');
    const policy = Policy.create(policyId, config, seed);
    this.byId.set(policyId, policy);
    return policy;
  }

  /** Registers an existing policy. CONFLICT if the id is taken. */
  add(policy: Policy): Policy {
    if (this.byId.has(policy.id)) throw conflict(`policy ${policy.id} is already registered`, 'policyId');
    this.byId.set(policy.id, policy);
    return policy;
  }

  /**
   * Swaps in a new object for a registered id (e.g. loaded from a checkpoint) and
   * disposes the old one (unless `disposeOld` is false: the caller then owns it). Refuses
   * (CONFLICT) a version lower than the current one, keeping versions monotonic per id.
   */
  replace(policy: Policy, options: { disposeOld?: boolean } = {}): Policy {
    const old = this.get(policy.id);
    if (policy.version < old.version) {
      throw conflict(`policy ${policy.id}: replacement version ${policy.version} is older than the current ${old.version}`, 'version');
    }
    if (old !== policy) {
      this.byId.set(policy.id, policy);
      if (options.disposeOld ?? true) old.dispose();
    }
    return policy;
  }

  /** Maps a role to a policy (re-mapping a role is allowed). NOT_FOUND if the policy is unknown. */
  assignRole(role: string, policyId: string): void {
    if (typeof role !== 'string' || role.length === 0) throw new ValidationError('role', 'must be a non-empty string');
    this.get(policyId);
    this.roleToPolicy.set(role, policyId);
  }

  /** Maps several roles to one shared policy. */
  share(policyId: string, roles: readonly string[]): void {
    for (const r of roles) this.assignRole(r, policyId);
  }

  has(policyId: string): boolean {
    return this.byId.has(policyId);
  }

  /** NOT_FOUND if unknown. */
  get(policyId: string): Policy {
    const p = this.byId.get(policyId);
    if (!p) throw new SrpoError(ErrorCode.NOT_FOUND, `no policy ${policyId}`, { field: 'policyId' });
    return p;
  }

  /** The policy id a role uses; NOT_FOUND if the role is unmapped. */
  policyIdForRole(role: string): string {
    const id = this.roleToPolicy.get(role);
    if (id === undefined) throw new SrpoError(ErrorCode.NOT_FOUND, `no policy assigned to role ${role}`, { field: 'role' });
    return id;
  }

  /** The policy a role uses; NOT_FOUND if the role is unmapped. */
  forRole(role: string): Policy {
    return this.get(this.policyIdForRole(role));
  }

  /** Roles mapped to a policy, sorted. */
  rolesOf(policyId: string): string[] {
    return [...this.roleToPolicy.entries()]
      .filter(([, id]) => id === policyId)
      .map(([r]) => r)
      .sort();
  }

  /** role → policyId, sorted by role. */
  roleMap(): Record<string, string> {
    return Object.fromEntries([...this.roleToPolicy.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  /** Registered policies, sorted by id. */
  policies(): Policy[] {
    return [...this.byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** Unregisters and disposes a policy; CONFLICT while roles still use it. */
  remove(policyId: string): void {
    const p = this.get(policyId);
    const roles = this.rolesOf(policyId);
    if (roles.length > 0) throw conflict(`policy ${policyId} is still used by roles ${roles.join(', ')}`, 'policyId');
    this.byId.delete(policyId);
    p.dispose();
  }

  /** Disposes every policy. */
  dispose(): void {
    for (const p of this.byId.values()) p.dispose();
    this.byId.clear();
    this.roleToPolicy.clear();
  }
}

function conflict(message: string, field: string): SrpoError {
  return new SrpoError(ErrorCode.CONFLICT, message, { field });
}
