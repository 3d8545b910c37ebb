import type { SeededRng } from '@srpo/policy';
import {
  checkerContext,
  checkerReward,
  isWellFormedAnswer,
  reverseAnswer,
  sampleReverseTask,
  solverContext,
  solverReward,
  verdictOf,
  type ArithmeticSettings,
} from '../envs/arithmetic.env';
import { episodeIdOf, toOutput, type EpisodeTrace, type RoleSampler, type TaskRollouts, type Workflow } from '../rollout';
import { render } from '../tokenizer';

/**
 * Fixed pipeline (division of labour, K = 1 at every step): a solver answers a
 * digit task (reverse and decrement mod k), then a checker accepts or rejects the answer. Each
 * role's set gets its own verified reward; the episode succeeds when a right
 * answer is accepted.
 */
export class FixedWorkflow implements Workflow {
  readonly name = 'fixed' as const;
  readonly kind = 'FIXED' as const;
  readonly roles = ['solver', 'checker'] as const;

  constructor(
    private readonly settings: ArithmeticSettings,
    private readonly rng: SeededRng,
  ) {}

  async play(taskInstanceId: string, groupSize: number, sampler: RoleSampler): Promise<TaskRollouts> {
    const s = this.settings;
    const task = sampleReverseTask(this.rng, s);
    const taskId = `fixed:reverse:${task.digits.join('')}`;
    const episodes = Array.from({ length: groupSize }, (_, g) => episodeIdOf(taskInstanceId, g));
    const solverDraws = await sampler.sample(
      'solver',
      episodes.map(() => solverContext(task)),
      s.reverseLength,
    );
    const solvers = solverDraws.map((d, g) => toOutput(d, episodes[g], 0, 'solver', 'solver-0'));
    const checkerDraws = await sampler.sample(
      'checker',
      solvers.map((o) => checkerContext(o.tokens)),
      1,
    );
    const checkers = checkerDraws.map((d, g) => toOutput(d, episodes[g], 1, 'checker', 'checker-0'));

    const traces = episodes.map((episodeId, g): EpisodeTrace => {
      const answer = solvers[g].tokens;
      const solved = solverReward(task, answer, s);
      const verdict = verdictOf(checkers[g].tokens[0]);
      const checked = checkerReward(answer, verdict, s);
      const success = solved.correct && verdict === 'accept';
      const answerDigest = `answer:${answer.join('.')}`;
      const verdictDigest = `verdict:${verdict}`;
      return {
        episodeId,
        taskId,
        workflow: this.name,
        kind: this.kind,
        steps: [
          {
            step: 0,
            position: 'solve',
            preStateId: `${episodeId}:0`,
            consumed: [solvers[g]],
            reward: solved.reward,
            observationDigest: answerDigest,
            routing: null,
            done: false,
          },
          {
            step: 1,
            position: 'check',
            preStateId: `${episodeId}:1`,
            consumed: [checkers[g]],
            reward: checked.reward,
            observationDigest: verdictDigest,
            routing: null,
            done: true,
          },
        ],
        outcome: {
          reward: success ? 1 : 0,
          success,
          details: {
            workflow: this.name,
            expected: render(reverseAnswer(task, s)),
            answer: render(answer),
            verdict,
            solverCorrect: String(solved.correct),
            wellFormed: String(isWellFormedAnswer(answer, s)),
            checkerCorrect: String(checked.correct),
          },
          observationDigests: ['start', answerDigest, verdictDigest],
          turns: 2,
        },
      };
    });
    return { taskInstanceId, workflow: this.name, groupSize, episodes: traces };
  }
}
