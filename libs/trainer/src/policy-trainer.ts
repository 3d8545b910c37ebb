import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { loadCheckpoint, packPairs, Policy, saveCheckpoint, SrpoTrainer, weightsHash, type AdamConfig, type TransformerConfig } from '@srpo/policy';
import { attachLora, LlamaModel, loadHfModel, type LoraConfig } from '@srpo/hf';
import { buildPaddedSetBatch, disposePaddedSetBatch, resolveCorrectionConfig, type CorrectionConfig, type ObjectiveConfig } from '@srpo/srpo';

/** One agent output of a set, as the trainer re-scores it. */
export interface TrainingMember {
  outputId: string;
  contextTokens: readonly number[];
  responseTokens: readonly number[];
  /** Behaviour log-probs recorded at sampling time: the denominator of every importance ratio. */
  logpOld: readonly number[];
  /** 1 = counted response token, 0 = ignored; one per response token. */
  mask: readonly number[];
  /** Sampling temperature; the new log-probs are computed at the same temperature. */
  temperature: number;
}

export interface TrainingSet {
  setId: string;
  advantage: number;
  members: readonly TrainingMember[];
}

export interface StepResult {
  /** Objective loss of the last epoch (evaluated at the weights that epoch started from). */
  loss: number;
  /** Pre-clip global gradient norm of the last epoch. */
  gradNorm: number;
  /** The last epoch's diagnostics from @srpo/srpo plus `grad/norm`, `optim/lr`, `epochs/count`, `epochs/first_loss`. */
  diagnostics: Record<string, number>;
}

/** {@link PolicyTrainer.probe}: one set evaluated alone at the current weights. */
export interface SetProbe {
  setId: string;
  /** The objective's loss on this set alone. */
  loss: number;
  /** Pre-clip global gradient norm of that loss. */
  gradNorm: number;
}

export interface CheckpointInfo {
  version: number;
  weightsHash: string;
}

/**
 * What the learner needs from a policy implementation. The learner owns
 * versions: `version` is 0 after {@link init}, the checkpoint's after
 * {@link load}, and goes up by exactly one per {@link step} (however many
 * optimizer epochs the step runs).
 */
export interface PolicyTrainer {
  readonly version: number;
  /** Fresh weights from a seed (same seed, same weights). */
  init(seed: number): Promise<void>;
  /** Replaces weights and optimizer state with a verified checkpoint. */
  load(checkpointDir: string): Promise<CheckpointInfo>;
  /** Writes weights and optimizer state at the current version. */
  save(checkpointDir: string): Promise<CheckpointInfo>;
  /** SHA-256 of the current weights (canonical order; identical on every backend). */
  weightsHash(): Promise<string>;
  /** Throws ValidationError naming the field if `step` would refuse these sets; touches nothing. */
  validate(sets: readonly TrainingSet[]): void;
  /**
   * One SRPO update on a mini-batch of whole sets. `correction` (default: none, no KL penalty)
   * is the engine/learner mismatch correction and KL penalty of docs/objective.md, section 7.
   */
  step(sets: readonly TrainingSet[], objective: ObjectiveConfig, correction?: CorrectionConfig): Promise<StepResult>;
  /**
   * Each set alone, in order: its loss and gradient norm at the current weights, as the
   * first epoch of {@link step} would compute them, without a step (weights, optimizer
   * state and version unchanged). The learner calls it after a non-finite step to find
   * the sets that caused it.
   */
  probe(sets: readonly TrainingSet[], objective: ObjectiveConfig, correction?: CorrectionConfig): Promise<SetProbe[]>;
  dispose(): void;
}

export interface TfPolicyTrainerOptions {
  policyId: string;
  /** Shape of the model created by {@link PolicyTrainer.init}; a loaded checkpoint carries its own. */
  model: TransformerConfig;
  /** When set, {@link PolicyTrainer.init} loads this Hugging Face directory as version 0 (the seed is then unused). */
  modelDir?: string;
  /** With `modelDir`: a LoRA adapter, initialised from the seed, is what trains. */
  lora?: LoraConfig;
  lr: number;
  epochs: number;
  maxGradNorm: number;
  /** See SrpoTrainerConfig.microBatchTokens; default 0 (one pass). */
  microBatchTokens?: number;
  adam?: AdamConfig;
}

/**
 * {@link PolicyTrainer} on @srpo/policy's transformer and SrpoTrainer.
 *
 * Filled in here because @srpo/policy does not offer it directly:
 * - SrpoTrainer fixes objective and temperature at construction, so a batch
 *   with another objective config or temperature gets a new trainer that takes
 *   over the Adam state (moments and step count);
 * - SrpoTrainer scores every member at one temperature, so a mini-batch whose
 *   members were sampled at different temperatures is refused (the learner
 *   skips such groups rather than compute wrong ratios);
 * - @srpo/policy bumps `Policy.version` once per epoch, the learner once per
 *   update, so checkpoints are written through a Policy view carrying the
 *   learner's version.
 */
export class TfPolicyTrainer implements PolicyTrainer {
  private policy?: Policy;
  private trainer?: SrpoTrainer;
  private trainerKey = '';
  private currentVersion = 0;

  constructor(readonly options: TfPolicyTrainerOptions) {}

  get version(): number {
    return this.currentVersion;
  }

  async init(seed: number): Promise<void> {
    const { policyId, modelDir, model, lora } = this.options;
    if (modelDir) {
      const hf = loadHfModel(modelDir).model;
      if (lora) attachLora(hf, lora, { seed });
      this.install(new Policy(policyId, hf));
    } else {
      this.install(Policy.create(policyId, model, seed));
    }
    this.currentVersion = 0;
  }

  async load(checkpointDir: string): Promise<CheckpointInfo> {
    const loaded = await loadCheckpoint(checkpointDir);
    if (loaded.manifest.policyId !== this.options.policyId) {
      loaded.policy.dispose();
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `checkpoint ${checkpointDir} belongs to policy ${loaded.manifest.policyId}, not ${this.options.policyId}`,
      );
    }
    this.install(loaded.policy);
    if (loaded.optimizerState) this.requireTrainer().optimizer.setState(loaded.optimizerState);
    this.currentVersion = loaded.manifest.version;
    return { version: loaded.manifest.version, weightsHash: loaded.manifest.weightsHash };
  }

  async save(checkpointDir: string): Promise<CheckpointInfo> {
    const policy = this.requirePolicy();
    const view = new Policy(policy.id, policy.model, this.currentVersion);
    const manifest = await saveCheckpoint(checkpointDir, view, this.requireTrainer().optimizer);
    return { version: manifest.version, weightsHash: manifest.weightsHash };
  }

  async weightsHash(): Promise<string> {
    return weightsHash(this.requirePolicy());
  }

  validate(sets: readonly TrainingSet[]): void {
    const policy = this.requirePolicy();
    if (sets.length === 0) throw new ValidationError('sets', 'a mini-batch needs at least one active set');
    const pairs = sets.flatMap((s) => s.members.map((m) => ({ contextTokens: m.contextTokens, responseTokens: m.responseTokens, mask: m.mask })));
    packPairs(pairs, policy.model, 'members');
    // The objective library's own checks (log-probs <= 0, masks, duplicate ids, ...); the tensors are tiny and freed at once.
    disposePaddedSetBatch(buildPaddedSetBatch(sets.map(toSetInput)));
    batchTemperature(sets);
  }

  async step(sets: readonly TrainingSet[], objective: ObjectiveConfig, correction?: CorrectionConfig): Promise<StepResult> {
    this.validate(sets);
    const trainer = await this.trainerFor(objective, batchTemperature(sets), correction);
    const result = await trainer.update(sets.map(toActiveSet));
    this.currentVersion += 1;
    const last = result.epochs[result.epochs.length - 1];
    return {
      loss: last.loss,
      gradNorm: last.gradNorm,
      diagnostics: { ...last.diagnostics, 'epochs/count': result.epochs.length, 'epochs/first_loss': result.loss },
    };
  }

  async probe(sets: readonly TrainingSet[], objective: ObjectiveConfig, correction?: CorrectionConfig): Promise<SetProbe[]> {
    this.validate(sets);
    const trainer = await this.trainerFor(objective, batchTemperature(sets), correction);
    const probes: SetProbe[] = [];
    for (const s of sets) probes.push({ setId: s.setId, ...(await trainer.evaluate([toActiveSet(s)])) });
    return probes;
  }

  dispose(): void {
    this.trainer?.dispose();
    this.policy?.dispose();
    this.trainer = undefined;
    this.policy = undefined;
  }

  private install(policy: Policy): void {
    this.dispose();
    this.policy = policy;
    this.trainer = this.makeTrainer(policy, { objective: undefined, temperature: 1 });
    this.trainerKey = '';
  }

  private makeTrainer(policy: Policy, extra: { objective?: ObjectiveConfig; temperature: number; correction?: CorrectionConfig }): SrpoTrainer {
    return new SrpoTrainer(policy, {
      objective: extra.objective,
      temperature: extra.temperature,
      correction: extra.correction,
      withReference: (score) => this.withReference(score),
      adam: this.options.adam,
      maxGradNorm: this.options.maxGradNorm,
      microBatchTokens: this.options.microBatchTokens ?? 0,
      schedule: { kind: 'constant', lr: this.options.lr },
      epochs: this.options.epochs,
    });
  }

  /** The trainer for this objective, temperature and correction, carrying the Adam state over when it has to be rebuilt. */
  private async trainerFor(objective: ObjectiveConfig, temperature: number, correction?: CorrectionConfig): Promise<SrpoTrainer> {
    const resolved = resolveCorrectionConfig(correction, 'correction');
    if (resolved.klCoef > 0) this.referenceModel();
    const key = JSON.stringify({ objective, temperature, correction: resolved });
    const current = this.requireTrainer();
    if (key === this.trainerKey) return current;
    const next = this.makeTrainer(this.requirePolicy(), { objective, temperature, correction: resolved });
    next.optimizer.setState(await current.optimizer.getState());
    current.dispose();
    this.trainer = next;
    this.trainerKey = key;
    return next;
  }

  /**
   * Runs `score` with the KL penalty's reference in place: the LoRA policy's base model, its
   * adapter detached for the call and attached again after (the same variables, nothing copied;
   * the adapter starts at B = 0, so this is exactly version 0's function).
   */
  private withReference<T>(score: () => T): T {
    const model = this.referenceModel();
    const adapter = model.adapter;
    model.setAdapter(undefined);
    try {
      return score();
    } finally {
      model.setAdapter(adapter);
    }
  }

  /**
   * The model whose base is the KL reference. Only LoRA policies have one for free: for full
   * weights the reference would be version 0's weights, a second copy of the model kept in
   * memory (and loaded from the version 0 checkpoint after every restart), which is not built.
   */
  private referenceModel(): LlamaModel {
    const model = this.requirePolicy().model;
    if (!(model instanceof LlamaModel) || model.adapter === undefined) {
      throw new ValidationError(
        'correction.klCoef',
        'a KL penalty needs a LoRA policy (its reference is the base model without the adapter); full-weight policies have no reference policy',
      );
    }
    return model;
  }

  private requirePolicy(): Policy {
    if (!this.policy) throw new SrpoError(ErrorCode.CONFLICT, 'policy trainer has no weights yet: call init() or load() first');
    return this.policy;
  }

  private requireTrainer(): SrpoTrainer {
    this.requirePolicy();
    return this.trainer as SrpoTrainer;
  }
}

function toActiveSet(s: TrainingSet) {
  return {
    setId: s.setId,
    advantage: s.advantage,
    members: s.members.map((m) => ({
      outputId: m.outputId,
      contextTokens: [...m.contextTokens],
      responseTokens: [...m.responseTokens],
      logpOld: [...m.logpOld],
      mask: [...m.mask],
    })),
  };
}

function toSetInput(s: TrainingSet) {
  return {
    setId: s.setId,
    advantage: s.advantage,
    members: s.members.map((m) => ({ outputId: m.outputId, logpOld: [...m.logpOld], mask: [...m.mask] })),
  };
}

/** The one temperature of every member; ValidationError naming the first member that differs. */
export function batchTemperature(sets: readonly TrainingSet[]): number {
  const first = sets[0]?.members[0]?.temperature;
  sets.forEach((s, i) =>
    s.members.forEach((m, j) => {
      if (typeof m.temperature !== 'number' || !(m.temperature > 0) || !Number.isFinite(m.temperature)) {
        throw new ValidationError(`sets[${i}].members[${j}].temperature`, `must be a finite number > 0, got ${String(m.temperature)}`);
      }
      if (m.temperature !== first) {
        throw new ValidationError(
          `sets[${i}].members[${j}].temperature`,
          `is ${m.temperature} but the mini-batch was sampled at ${first}; one update scores every member at one temperature`,
        );
      }
    }),
  );
  return first;
}
