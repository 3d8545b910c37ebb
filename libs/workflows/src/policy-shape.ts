import { Policy } from '@srpo/policy';
import { isLlamaModel, type HfModelSource } from '@srpo/hf';
import type { ArithmeticSettings } from './envs/arithmetic.env';
import type { SearchSettings } from './envs/doc-search.env';
import type { WorkflowName } from './rollout';
import { VOCAB_SIZE } from './tokenizer';

/** Longest model input (context + response − 1) any of `workflows` needs. */
export function requiredSeqLen(config: { workflows: readonly WorkflowName[]; arithmetic: ArithmeticSettings; search: SearchSettings }): number {
  const { reverseLength: l, workers: n } = config.arithmetic;
  const need: Record<WorkflowName, number> = {
    fixed: Math.max(3 + l + l, 3 + l + 1) - 1,
    joint: Math.max(5 + 1, 3 + n + n) - 1,
    routed: Math.max(3 + n + n, 5 + 1, 3 + n + n) - 1,
    search: 4 + 3 * (config.search.turns - 1) + 1 - 1,
  };
  return Math.max(...config.workflows.map((w) => need[w]));
}

/**
 * Why the agents' workflows cannot sample with `policy`, or undefined when they can: it must
 * accept `requiredSeqLen` positions, and be a Hugging Face model on `base` exactly when the
 * agents have one (the base's tokenizer binds the symbols), else the project's transformer
 * with at least the 32 symbols.
 */
export function policyShapeProblem(policy: Policy, requiredSeqLen: number, base: HfModelSource | undefined): string | undefined {
  const { model } = policy;
  const { vocabSize, maxSeqLen } = model.config;
  if (maxSeqLen < requiredSeqLen) {
    return `the model accepts ${maxSeqLen} positions; the agents' workflows need ${requiredSeqLen}`;
  }
  if (isLlamaModel(model)) {
    const source = model.source;
    if (!base)
      return `the policy is a Hugging Face model${source ? ` on ${source.dir}` : ''}; set the agents' SRPO_MODEL_DIR to the learners' model directory so that its tokenizer binds the workflow symbols`;
    if (!source || source.hash !== base.hash) {
      return `the policy's base model ${source ? `${source.dir} (hash ${source.hash})` : '(unrecorded)'} is not the agents' SRPO_MODEL_DIR ${base.dir} (hash ${base.hash})`;
    }
    return undefined;
  }
  if (base)
    return `the policy is the project's transformer, but the agents' SRPO_MODEL_DIR names the Hugging Face model ${base.dir}; unset it or train the policy from that directory`;
  if (vocabSize < VOCAB_SIZE)
    return `the model's vocabSize ${vocabSize} is below the workflows' ${VOCAB_SIZE} symbols; set the learners' SRPO_MODEL_CONFIG accordingly`;
  return undefined;
}
