import { ValidationError } from '@srpo/core';
import { tokenLogProbs, type CausalLm } from '@srpo/policy';
import { meanTokenNll } from './credits';

export interface InstructionScorerOptions {
  /** Tokens every scoring context starts with (default `[0]`, BOS in the demo vocabulary); the "no action shown" context. */
  prefixTokens?: number[];
  /** Softmax temperature of the scorer (default 1). */
  temperature?: number;
}

/** Anything that yields `[L_{−1}, L_1, …, L_K]` for an instruction and K actions. */
export interface NllCurveScorer {
  nllCurve(instruction: readonly number[], actions: readonly (readonly number[])[]): Promise<number[]>;
}

/**
 * The NLL curve PMI credits are read from: with a scorer language model,
 *
 *   L_k = −(1/|y|) Σ_t log p(y_t | prefix ++ a_1 ++ … ++ a_k, y_<t),   k = −1 (no action), 1..K,
 *
 * y the inferred instruction and a_k the k-th successful action's tokens. All
 * K + 1 contexts are scored in one forward pass; contexts longer than the
 * model's window are left-truncated (the instruction is always kept whole).
 */
export class InstructionScorer implements NllCurveScorer {
  private readonly prefix: number[];
  private readonly temperature: number;

  constructor(
    private readonly model: CausalLm,
    options: InstructionScorerOptions = {},
  ) {
    this.prefix = options.prefixTokens ?? [0];
    if (this.prefix.length === 0) throw new ValidationError('prefixTokens', 'must hold at least one token (the instruction is predicted from something)');
    this.temperature = options.temperature ?? 1;
  }

  /**
   * @param instruction y, 1..maxSeqLen tokens
   * @param actions     a_1..a_K, the successful actions' tokens in order
   * @returns `[L_{−1}, L_1, …, L_K]`, length K + 1, in nats per token
   */
  async nllCurve(instruction: readonly number[], actions: readonly (readonly number[])[]): Promise<number[]> {
    if (instruction.length === 0) throw new ValidationError('instruction', 'must hold at least one token');
    const pairs = Array.from({ length: actions.length + 1 }, (_, k) => ({
      contextTokens: [...this.prefix, ...actions.slice(0, k).flat()],
      responseTokens: instruction,
    }));
    const { logProbs, mask } = tokenLogProbs(this.model, pairs, { temperature: this.temperature });
    try {
      const [lp, m] = await Promise.all([logProbs.array(), mask.array()]);
      return lp.map((row, k) => meanTokenNll(row, m[k]));
    } finally {
      logProbs.dispose();
      mask.dispose();
    }
  }
}
