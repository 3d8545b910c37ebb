import { ValidationError } from '@srpo/core';
import { sampleBatch, SeededRng, type PolicyRegistry } from '@srpo/policy';
import type { Draw, Role, RoleSampler } from './rollout';
import { IDENTITY_BINDING, type SymbolBinding } from './symbol-binding';

/**
 * {@link RoleSampler} over a `PolicyRegistry`: a role samples with the policy
 * the registry maps it to, at that policy's current version, which is what each
 * draw is stamped with. The registry's policies must not be replaced while a
 * `sample` call runs (callers swap weights between tasks).
 *
 * Contexts come in and draws go out in the workflows' symbols; the model sees the
 * `binding`'s ids (identity for the project's transformer).
 */
export class PolicySampler implements RoleSampler {
  private readonly rng: SeededRng;

  constructor(
    private readonly registry: PolicyRegistry,
    private readonly options: { seed: number; temperature: number; clock?: () => number; binding?: SymbolBinding },
  ) {
    if (!(options.temperature > 0) || !Number.isFinite(options.temperature)) {
      throw new ValidationError('temperature', `must be a finite number > 0, got ${options.temperature}`);
    }
    this.rng = new SeededRng(options.seed);
  }

  async sample(role: Role, contexts: readonly (readonly number[])[], maxNewTokens: number): Promise<Draw[]> {
    const policy = this.registry.forRole(role);
    const clock = this.options.clock ?? Date.now;
    const startedAtMs = clock();
    const binding = this.options.binding ?? IDENTITY_BINDING;
    const modelContexts = contexts.map((c) => binding.toModel(c));
    const results = await sampleBatch(policy.model, modelContexts, { maxNewTokens, temperature: this.options.temperature, rng: this.rng });
    const finishedAtMs = Math.max(clock(), startedAtMs);
    return results.map((r) => ({
      policyId: policy.id,
      policyVersion: policy.version,
      contextTokens: binding.toSymbols(r.contextTokens),
      tokens: binding.toSymbols(r.tokens),
      // log-probs are float32 values: clamp the rare +0 rounding above 0 so every one is a valid log-probability.
      logProbs: r.logProbs.map((lp) => Math.min(lp, 0)),
      temperature: this.options.temperature,
      maxNewTokens,
      startedAtMs,
      finishedAtMs,
    }));
  }
}
