/** One judged output as text, decoded from its token ids with the policy's tokenizer. */
export interface JudgedText {
  outputId: string;
  step: number;
  role: string;
  agentId: string;
  policyId: string;
  policyVersion: number;
  prompt: string;
  response: string;
}

/**
 * What is judged: one output (`--mode output`) or an episode's judged outputs in step order
 * (`--mode episode`). It is what a rubric is rendered from, and what a reward module gets or a
 * reward endpoint receives as JSON.
 */
export interface RewardInput {
  mode: 'output' | 'episode';
  episodeId: string;
  taskId: string;
  outputs: JudgedText[];
}

/** A score and what the outcome records of how it was reached. */
export interface Verdict {
  /** The reward the outcome carries. */
  reward: number;
  /** The score before mapping (the judge's number; a plugin's reward). */
  rawScore: number;
  /** Per-judgement details (the judge's reported version, ...); string values, as the schema's map. */
  details: Record<string, string>;
}

/** Something that scores a {@link RewardInput}: the rubric judge or a verifiable-reward plugin. */
export interface Scorer {
  /** `EpisodeOutcome.verifier`: `judge:<model>`, `module:<file>`, `http:<host>`. */
  readonly verifier: string;
  /** Recorded in every outcome (model, rubric hash, endpoint host, module hash). */
  readonly details: Readonly<Record<string, string>>;
  /** Resolves with a verdict or rejects with a `JudgeFailure` naming the reason. */
  score(input: RewardInput): Promise<Verdict>;
}

/** `{{prompt}}`: the first judged output's prompt (the task as the agent saw it). */
export function promptOf(input: RewardInput): string {
  return input.outputs[0]?.prompt ?? '';
}

/** `{{response}}`: one output's response; several are headed by role and step, in step order. */
export function responseOf(input: RewardInput): string {
  if (input.outputs.length === 1) return input.outputs[0].response;
  return input.outputs.map((o) => `[${o.role}, step ${o.step}]\n${o.response}`).join('\n\n');
}

/** `{{transcript}}`: every judged output's prompt and response, headed by role and step. */
export function transcriptOf(input: RewardInput): string {
  return input.outputs.map((o) => `[${o.role}, step ${o.step}] prompt:\n${o.prompt}\n[${o.role}, step ${o.step}] response:\n${o.response}`).join('\n\n');
}
