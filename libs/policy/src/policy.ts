import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import type { CausalLm } from './causal-lm';
import { TransformerModel, type TransformerConfig } from './transformer';

/**
 * The model a policy holds: what scoring, sampling, the update step and the checkpoint store
 * need of it. Which families exist is not fixed here: each is a `ModelFamily` (model-family.ts) registered
 * with the checkpoint store (the project's transformer here, `hf-llama` by @srpo/hf), told
 * apart by `kind`; narrow with the family's guard (`isTransformerModel`, @srpo/hf's
 * `isLlamaModel`). `config` must be plain JSON: checkpoints store it.
 */
export type PolicyModel = CausalLm;

/**
 * A trainable policy: a model (the project's transformer, or a Hugging Face
 * Llama-family checkpoint) plus its identity. The version starts at
 * the value given (0 for a fresh policy) and only ever goes up — each applied
 * update bumps it — so a (policyId, version) pair names one set of weights.
 */
export class Policy {
  private currentVersion: number;

  constructor(
    readonly id: string,
    readonly model: PolicyModel,
    version = 0,
  ) {
    if (typeof id !== 'string' || id.length === 0) throw new ValidationError('policyId', 'must be a non-empty string');
    checkVersion(version, 'version');
    this.currentVersion = version;
  }

  /** Creates a policy with a freshly initialised model (seeded: same seed, same weights). */
  static create(id: string, config: TransformerConfig, seed: number): Policy {
    return new Policy(id, TransformerModel.create(config, seed));
  }

  get version(): number {
    return this.currentVersion;
  }

  /** Increments the version; called once per applied optimizer step. */
  bumpVersion(): number {
    this.currentVersion += 1;
    return this.currentVersion;
  }

  /** Moves the version forward to `version`; refuses to go back (CONFLICT). */
  advanceVersionTo(version: number): void {
    checkVersion(version, 'version');
    if (version < this.currentVersion) {
      throw new SrpoError(ErrorCode.CONFLICT, `policy ${this.id}: version must not decrease (${this.currentVersion} -> ${version})`, {
        field: 'version',
      });
    }
    this.currentVersion = version;
  }

  dispose(): void {
    this.model.dispose();
  }
}

function checkVersion(version: number, field: string): void {
  if (!Number.isSafeInteger(version) || version < 0) throw new ValidationError(field, `must be a non-negative integer, got ${String(version)}`);
}
