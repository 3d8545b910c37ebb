import { ErrorCode, SrpoError } from '@srpo/core';
import type { CheckpointManifest } from './checkpoint-store';
import type { PolicyModel } from './policy';

/**
 * What a checkpoint's model.json records about its model beyond the weights: the family's
 * `kind`, the model's `config` and any fields of the family's own (the Hugging Face family
 * adds `base` and `lora`), in the order they are written. Plain JSON: it is stored as is, and
 * the fields after `config` are copied into the manifest in the same order.
 */
export interface ModelTopology {
  readonly kind: string;
  readonly config: unknown;
  readonly [field: string]: unknown;
}

/** One decoded weight of a checkpoint: its shape and float32 values (a copy, aligned). */
export interface CheckpointTensor {
  readonly shape: number[];
  readonly data: Float32Array;
}

/**
 * A kind of model a policy can hold, as the checkpoint store sees it: how to describe one and
 * how to rebuild one from a manifest and its weights. The project's transformer is registered
 * by @srpo/policy itself; other families register when their library loads (`import '@srpo/hf'`
 * registers `hf-llama`), so that @srpo/policy never imports them.
 */
export interface ModelFamily {
  /** The `kind` of the models this family makes; checkpoints record it as `modelKind`. */
  readonly kind: string;
  /** The topology to store for `model` (whose kind is this family's); throws when it cannot be saved. */
  topology(model: PolicyModel, dir: string): ModelTopology;
  /**
   * Checks the manifest's family fields before any weight is decoded. Throws an error whose
   * message says what is wrong; the checkpoint store reports it as INTEGRITY_FAILED.
   */
  checkManifest(manifest: CheckpointManifest): void;
  /**
   * Rebuilds the model from a verified manifest and its weights (optimizer state excluded).
   * Throws when they do not fit; the store reports that as INTEGRITY_FAILED.
   */
  restore(manifest: CheckpointManifest, tensors: ReadonlyMap<string, CheckpointTensor>, dir: string): PolicyModel;
}

/**
 * A checkpoint (or a model) of a family no module of this process has registered. Most often
 * a Hugging Face policy loaded by a program that did not `import '@srpo/hf'`.
 */
export class UnknownModelFamilyError extends SrpoError {
  constructor(
    readonly kind: string,
    where: string,
  ) {
    super(
      ErrorCode.ENVIRONMENT,
      `${where}: no model family "${kind}" is registered in this process (registered: ${[...families.keys()].sort().join(', ') || 'none'}); ` +
        `a Hugging Face policy ("hf-llama") needs import '@srpo/hf'`,
      { field: 'modelKind', details: { kind } },
    );
  }
}

const families = new Map<string, ModelFamily>();

/**
 * Makes a family known to the checkpoint store. Registering the same family object again is a
 * no-op; a different family for a kind already taken is refused (CONFLICT): checkpoints of
 * that kind would otherwise rebuild into whichever module registered last.
 */
export function registerModelFamily(family: ModelFamily): void {
  const known = families.get(family.kind);
  if (known === undefined || known === family) {
    families.set(family.kind, family);
    return;
  }
  throw new SrpoError(ErrorCode.CONFLICT, `model family "${family.kind}" is already registered by another module`, {
    field: 'kind',
    details: { kind: family.kind },
  });
}

/** The family registered for `kind`; throws {@link UnknownModelFamilyError} naming `where` (a checkpoint directory, ...). */
export function modelFamily(kind: string, where = 'model'): ModelFamily {
  const family = families.get(kind);
  if (!family) throw new UnknownModelFamilyError(kind, where);
  return family;
}

/** The kinds registered so far, sorted. */
export function registeredModelFamilies(): string[] {
  return [...families.keys()].sort();
}
