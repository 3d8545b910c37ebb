import type { SeededRng } from '@srpo/policy';
import {
  aggregatorContext,
  aggregatorReward,
  jointReward,
  sameTokens,
  sampleJointTask,
  slotsAnswer,
  workerContext,
  workerReward,
  type ArithmeticSettings,
} from '../envs/arithmetic.env';
import { episodeIdOf, toOutput, type EpisodeTrace, type RoleSampler, type SampledOutput, type TaskRollouts, type Workflow } from '../rollout';
import { render } from '../tokenizer';

/**
 * Joint co-evolution (K = N): N workers answer in parallel, each for its slot,
 * and one transition consumes all N outputs; the set's single reward is the
 * workers' mean, so they are credited (and clipped) as one joint action. An
 * aggregator (K = 1) then assembles their answers; the episode succeeds when
 * the assembled answer is right in every slot.
 */
export class JointWorkflow implements Workflow {
  readonly name = 'joint' as const;
  readonly kind = 'JOINT' as const;
  readonly roles = ['worker', 'aggregator'] as const;

  constructor(
    private readonly settings: ArithmeticSettings,
    private readonly rng: SeededRng,
  ) {}

  async play(taskInstanceId: string, groupSize: number, sampler: RoleSampler): Promise<TaskRollouts> {
    const s = this.settings;
    const n = s.workers;
    const task = sampleJointTask(this.rng, s);
    const taskId = `joint:${task.slots.join(',')}`;
    const episodes = Array.from({ length: groupSize }, (_, g) => episodeIdOf(taskInstanceId, g));
    // All G·N worker calls in one batch: row g·N + i is worker i of rollout g.
    const workerDraws = await sampler.sample(
      'worker',
      episodes.flatMap(() => Array.from({ length: n }, (_, i) => workerContext(task, i))),
      1,
    );
    const workers: SampledOutput[][] = episodes.map((e, g) =>
      Array.from({ length: n }, (_, i) => toOutput(workerDraws[g * n + i], e, 0, 'worker', `worker-${i}`)),
    );
    const aggDraws = await sampler.sample(
      'aggregator',
      workers.map((ws) => aggregatorContext(ws.map((w) => w.tokens[0]))),
      n,
    );
    const expected = slotsAnswer(task, s);

    const traces = episodes.map((episodeId, g): EpisodeTrace => {
      const answers = workers[g].map((w) => w.tokens[0]);
      const graded = answers.map((a, i) => workerReward(task, i, [a], s));
      const agg = toOutput(aggDraws[g], episodeId, 1, 'aggregator', 'aggregator-0');
      const aggregated = aggregatorReward(answers, agg.tokens, s);
      const success = sameTokens(agg.tokens, expected);
      const workDigest = `work:${answers.join('.')}`;
      const finalDigest = `final:${agg.tokens.join('.')}`;
      return {
        episodeId,
        taskId,
        workflow: this.name,
        kind: this.kind,
        steps: [
          {
            step: 0,
            position: 'work',
            preStateId: `${episodeId}:0`,
            consumed: workers[g],
            reward: jointReward(graded.map((r) => r.reward)),
            observationDigest: workDigest,
            routing: null,
            done: false,
          },
          {
            step: 1,
            position: 'aggregate',
            preStateId: `${episodeId}:1`,
            consumed: [agg],
            reward: aggregated.reward,
            observationDigest: finalDigest,
            routing: null,
            done: true,
          },
        ],
        outcome: {
          reward: success ? 1 : 0,
          success,
          details: {
            workflow: this.name,
            expected: render(expected),
            answer: render(agg.tokens),
            workers: render(answers),
            workersCorrect: String(graded.filter((r) => r.correct).length),
          },
          observationDigests: ['start', workDigest, finalDigest],
          turns: 2,
        },
      };
    });
    return { taskInstanceId, workflow: this.name, groupSize, episodes: traces };
  }
}
