import { Policy, type HfModelSource } from '@srpo/policy';
import { VOCAB_SIZE } from './tokenizer';

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
  if (model.kind === 'hf-llama') {
    const source = model.source;
    if (!base) return `the policy is a Hugging Face model${source ? ` on ${source.dir}` : ''}; set the agents' SRPO_MODEL_DIR to the learners' model directory so that its tokenizer binds the workflow symbols`;
    if (!source || source.hash !== base.hash) {
      return `the policy's base model ${source ? `${source.dir} (hash ${source.hash})` : '(unrecorded)'} is not the agents' SRPO_MODEL_DIR ${base.dir} (hash ${base.hash})`;
    }
    return undefined;
  }
  if (base) return `the policy is the project's transformer, but the agents' SRPO_MODEL_DIR names the Hugging Face model ${base.dir}; unset it or train the policy from that directory`;
  if (vocabSize < VOCAB_SIZE) return `the model's vocabSize ${vocabSize} is below the workflows' ${VOCAB_SIZE} symbols; set the learners' SRPO_MODEL_CONFIG accordingly`;
  return undefined;
}
