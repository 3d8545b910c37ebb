import { createHash } from 'crypto';
import { ValidationError } from '@srpo/core';
import { sampleBatch, type Policy } from '@srpo/policy';
import type { Trajectory, TrajectoryAction } from './trajectory';

/** An instruction inferred after the fact: tokens for the models, a label for people. */
export interface InferredInstruction {
  tokens: number[];
  label: string;
}

/**
 * Retrospective task inference: which instruction did a trajectory actually
 * fulfil? Implementations see only the trajectory's successful actions (the
 * job filters failed ones out before calling), and return null when they cannot
 * say (the trajectory is then not used).
 */
export interface TaskInferrer {
  /** Name and version, recorded with every inferred task (`demo-env@1`). */
  readonly name: string;
  /** @param successfulOnly the trajectory with its failed actions removed (at least one action left) */
  infer(successfulOnly: Trajectory): Promise<InferredInstruction | null>;
  /** The prompt an action is trained on under the inferred instruction. */
  trainingContext(instruction: InferredInstruction, action: TrajectoryAction): number[];
}

/** The trajectory seen by an inferrer: failed actions dropped. */
export function successfulOnly(t: Trajectory): Trajectory {
  return { ...t, actions: t.actions.filter((a) => a.successful) };
}

export interface PolicyTaskInferrerOptions {
  /** Tokens the prompt starts with (default `[0]`, BOS in the demo vocabulary). */
  promptPrefix?: number[];
  /** Token between the actions and the instruction (default 1, SEP in the demo vocabulary). */
  separator?: number;
  /** Longest instruction generated (default 4). */
  maxTokens?: number;
  /** Generation stops after any of these (kept in the instruction). */
  stopTokens?: number[];
  /** Sampling temperature (default 1). */
  temperature?: number;
  /** Mixed with a hash of the episode id, so inference is repeatable per trajectory. */
  seed?: number;
}

/**
 * Asks a policy model to write the instruction: it is conditioned on the
 * successful actions' tokens, `prefix ++ a_1 ++ … ++ a_K ++ separator`, and
 * samples the instruction tokens (seeded per episode). Actions are trained on
 * `instruction ++ their own context`, since a generic model has no knowledge
 * of where in a context the task sits.
 */
export class PolicyTaskInferrer implements TaskInferrer {
  readonly name: string;
  private readonly prefix: number[];
  private readonly separator: number;
  private readonly maxTokens: number;
  private readonly stopTokens: number[];
  private readonly temperature: number;
  private readonly seed: number;

  constructor(
    private readonly policy: Policy,
    options: PolicyTaskInferrerOptions = {},
  ) {
    this.name = `policy:${policy.id}@v${policy.version}`;
    this.prefix = options.promptPrefix ?? [0];
    this.separator = options.separator ?? 1;
    this.maxTokens = options.maxTokens ?? 4;
    if (!Number.isInteger(this.maxTokens) || this.maxTokens < 1) throw new ValidationError('maxTokens', `must be a positive integer, got ${this.maxTokens}`);
    this.stopTokens = options.stopTokens ?? [];
    this.temperature = options.temperature ?? 1;
    this.seed = options.seed ?? 0;
  }

  async infer(t: Trajectory): Promise<InferredInstruction | null> {
    if (t.actions.length === 0) return null;
    const prompt = [...this.prefix, ...t.actions.flatMap((a) => a.responseTokens), this.separator];
    const episodeSeed = createHash('sha256').update(t.episodeId).digest().readUInt32LE(0);
    const [out] = await sampleBatch(this.policy.model, [prompt], {
      maxNewTokens: this.maxTokens,
      stopTokens: this.stopTokens,
      temperature: this.temperature,
      seed: (episodeSeed ^ this.seed) >>> 0,
    });
    if (out.tokens.length === 0) return null;
    return { tokens: out.tokens, label: `[${out.tokens.join(' ')}]` };
  }

  trainingContext(instruction: InferredInstruction, action: TrajectoryAction): number[] {
    return [...instruction.tokens, ...action.contextTokens];
  }
}
