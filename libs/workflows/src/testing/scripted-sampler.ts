import type { Draw, Role, RoleSampler } from '../rollout';

/** What a scripted role answers for a context (and the rollout's row in the call). */
export type Script = (context: readonly number[], row: number) => number[];

/**
 * A deterministic RoleSampler for tests: each role answers by script, with
 * plausible log-probs. It stands in for the policy, not for Kafka.
 */
export class ScriptedSampler implements RoleSampler {
  readonly calls: { role: Role; contexts: number[][]; maxNewTokens: number }[] = [];

  constructor(
    private readonly scripts: Partial<Record<Role, Script>>,
    private readonly policyOf: (role: Role) => string = (role) => `${role}-policy`,
    private readonly version = 3,
  ) {}

  async sample(role: Role, contexts: readonly (readonly number[])[], maxNewTokens: number): Promise<Draw[]> {
    this.calls.push({ role, contexts: contexts.map((c) => [...c]), maxNewTokens });
    const script = this.scripts[role];
    if (!script) throw new Error(`no script for role ${role}`);
    return contexts.map((ctx, row) => {
      const tokens = script(ctx, row).slice(0, maxNewTokens);
      while (tokens.length < maxNewTokens) tokens.push(0);
      return {
        policyId: this.policyOf(role),
        policyVersion: this.version,
        contextTokens: [...ctx],
        tokens,
        logProbs: tokens.map(() => -1.25),
        temperature: 1,
        maxNewTokens,
        startedAtMs: 1_700_000_000_000,
        finishedAtMs: 1_700_000_000_005,
      };
    });
  }
}
