import type { ChatJudge, JudgeAnswer } from './judge-client';
import { JudgeFailure } from './judge-errors';
import type { RewardInput } from './judge-input';
import { RubricJudge } from './rubric-judge';
import { RubricTemplate } from './rubric-template';

/** A scripted judge: records the prompts it is asked, answers from a list. */
class ScriptedJudge implements ChatJudge {
  readonly prompts: string[] = [];
  constructor(private readonly answers: JudgeAnswer[]) {}
  ask(prompt: string): Promise<JudgeAnswer> {
    this.prompts.push(prompt);
    const a = this.answers.shift();
    return a ? Promise.resolve(a) : Promise.reject(new Error('no more answers'));
  }
}

const out = (step: number, role: string, response: string) => ({
  outputId: `o${step}`,
  step,
  role,
  agentId: 'a',
  policyId: 'actor',
  policyVersion: 1,
  prompt: `prompt ${step}`,
  response,
});
const rubric = RubricTemplate.fromText('r.txt', 'P={{prompt}}\nR={{response}}\nT={{task}}');

describe('RubricJudge', () => {
  it('renders the rubric, parses the score and reports the answering version', async () => {
    const client = new ScriptedJudge([{ content: 'Score: 8', model: 'm-2026', systemFingerprint: 'fp1' }]);
    const judge = new RubricJudge({ client, rubric, model: 'm', range: { min: 0, max: 10 }, endpointHost: 'h:1' });
    const input: RewardInput = { mode: 'episode', episodeId: 'e', taskId: 'task', outputs: [out(0, 'planner', 'plan'), out(1, 'solver', '42')] };
    await expect(judge.score(input)).resolves.toEqual({ reward: 0.8, rawScore: 8, details: { judgeVersion: 'm-2026', judgeSystemFingerprint: 'fp1' } });
    expect(client.prompts[0]).toBe('P=prompt 0\nR=[planner, step 0]\nplan\n\n[solver, step 1]\n42\nT=task');
    expect(judge.verifier).toBe('judge:m');
    expect(judge.details).toMatchObject({ judgeModel: 'm', promptSha256: rubric.sha256, rubric: 'r.txt', endpointHost: 'h:1' });
  });

  it('calls an answer without a score garbage', async () => {
    const client = new ScriptedJudge([{ content: 'Looks fine to me.', model: 'm', systemFingerprint: undefined }]);
    const judge = new RubricJudge({ client, rubric, model: 'm', range: { min: 0, max: 10 }, endpointHost: 'h' });
    const e = await judge.score({ mode: 'output', episodeId: 'e', taskId: 't', outputs: [out(0, 'r', 'x')] }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(JudgeFailure);
    expect((e as JudgeFailure).reason).toBe('garbage');
  });
});
