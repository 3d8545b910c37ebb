import { ValidationError } from '@srpo/core';
import { digit, digitValue, render, Tok } from '../tokenizer';
import { solverContext, workerContext, type ArithmeticSettings } from '../envs/arithmetic.env';
import type { InferredInstruction, TaskInferrer } from '@srpo/offline';
import type { Trajectory, TrajectoryAction } from '@srpo/offline';

/**
 * Environment-aware inference for the demo's arithmetic workflows, as hindsight
 * relabelling does it: the instruction is the task whose right answer is the
 * answer the trajectory actually produced.
 *
 * - fixed (solver → checker): the solver answers the task digits reversed and
 *   decremented mod k, so an answer `a` fulfils the task
 *   `d = reverse(a) + 1 mod k`; the instruction is that task's solver prompt.
 * - joint (workers → aggregator): the aggregator's answer `f` fulfils the task
 *   whose slots are `f − 1 mod k` (BLANK stays an empty slot); workers are
 *   trained on their slot of that task.
 *
 * An answer that is not made of in-range digits fulfils no task: null.
 */
export class DemoEnvTaskInferrer implements TaskInferrer {
  readonly name = 'demo-env@1';

  constructor(private readonly settings: Pick<ArithmeticSettings, 'modulus' | 'reverseLength'>) {
    if (!Number.isInteger(settings.modulus) || settings.modulus < 2)
      throw new ValidationError('settings.modulus', `must be an integer >= 2, got ${settings.modulus}`);
  }

  async infer(t: Trajectory): Promise<InferredInstruction | null> {
    const k = this.settings.modulus;
    const solver = t.actions.find((a) => a.role === 'solver');
    if (solver) {
      const answer = solver.responseTokens.map(digitValue);
      if (answer.length !== this.settings.reverseLength || answer.some((d) => d === undefined || d >= k)) return null;
      const digits = [...(answer as number[])].reverse().map((d) => (d + 1) % k);
      const tokens = solverContext({ digits });
      return { tokens, label: render(tokens) };
    }
    const aggregator = t.actions.find((a) => a.role === 'aggregator');
    if (aggregator) {
      const slots = aggregator.responseTokens.map((tok): number | null | undefined => {
        if (tok === Tok.BLANK) return null;
        const d = digitValue(tok);
        return d === undefined || d >= k ? undefined : (d + k - 1) % k;
      });
      if (slots.length === 0 || slots.some((s) => s === undefined)) return null;
      const tokens = [Tok.BOS, Tok.WORK, ...(slots as (number | null)[]).map((s) => (s === null ? Tok.BLANK : digit(s))), Tok.SEP];
      return { tokens, label: render(tokens) };
    }
    return null;
  }

  trainingContext(instruction: InferredInstruction, action: TrajectoryAction): number[] {
    if (action.role === 'solver') return [...instruction.tokens];
    if (action.role === 'worker' && instruction.tokens[1] === Tok.WORK) {
      // The worker's slot index is the third token of its own prompt ([BOS WORK SLOTi v SEP]).
      const slotIndex = action.contextTokens[2] - Tok.SLOT0;
      const values = instruction.tokens.slice(2, -1).map((tok) => (tok === Tok.BLANK ? null : (digitValue(tok) as number)));
      if (slotIndex >= 0 && slotIndex < values.length) return workerContext({ slots: values }, slotIndex);
    }
    // Later roles read what earlier agents produced, which relabelling leaves as it was.
    return [...action.contextTokens];
  }
}
