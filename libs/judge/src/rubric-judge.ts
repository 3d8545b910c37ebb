import type { ChatJudge } from './judge-client';
import { JudgeFailure } from './judge-errors';
import { promptOf, responseOf, transcriptOf, type RewardInput, type Scorer, type Verdict } from './judge-input';
import type { RubricTemplate } from './rubric-template';
import { parseScore, type ScoreRange } from './score-parser';

export interface RubricJudgeOptions {
  client: ChatJudge;
  rubric: RubricTemplate;
  /** The model asked for (`--model`). */
  model: string;
  range: ScoreRange;
  /** The endpoint's host, recorded (never the URL's credentials or the key). */
  endpointHost: string;
}

/**
 * The LLM judge: renders the rubric with the judged text, asks the endpoint, parses a score.
 * The outcome's `verifier` is `judge:<model>` and its details name the rubric (file name and
 * SHA-256), the endpoint's host and the version the endpoint reports answering with.
 */
export class RubricJudge implements Scorer {
  readonly verifier: string;
  readonly details: Readonly<Record<string, string>>;

  constructor(private readonly options: RubricJudgeOptions) {
    this.verifier = `judge:${options.model}`;
    this.details = {
      judgeModel: options.model,
      promptSha256: options.rubric.sha256,
      rubric: options.rubric.name,
      endpointHost: options.endpointHost,
      scoreRange: `${options.range.min}..${options.range.max}`,
    };
  }

  async score(input: RewardInput): Promise<Verdict> {
    const prompt = this.options.rubric.render({
      prompt: promptOf(input),
      response: responseOf(input),
      transcript: transcriptOf(input),
      policy: input.outputs[0]?.policyId ?? '',
      task: input.taskId,
      episode: input.episodeId,
    });
    const answer = await this.options.client.ask(prompt);
    const parsed = parseScore(answer.content, this.options.range);
    if (!parsed.ok) throw new JudgeFailure('garbage', `judge answer unusable: ${parsed.problem}`);
    return {
      reward: parsed.reward,
      rawScore: parsed.rawScore,
      details: { judgeVersion: answer.model, ...(answer.systemFingerprint !== undefined ? { judgeSystemFingerprint: answer.systemFingerprint } : {}) },
    };
  }
}
