import type { SeededRng } from '@srpo/policy';
import {
  aggregatorContext,
  aggregatorReward,
  jointReward,
  routerContext,
  sameTokens,
  sampleRoutedTask,
  slotsAnswer,
  workerContext,
  workerReward,
  type ArithmeticSettings,
} from '../envs/arithmetic.env';
import { decodeRouting, routerReward } from '../routing';
import { episodeIdOf, toOutput, type EpisodeTrace, type RoleSampler, type SampledOutput, type TaskRollouts, type Workflow } from '../rollout';
import { render, Tok } from '../tokenizer';

/**
 * Dynamically routed: a router policy decides, per task, which workers act
 * (one YES/NO token per slot). The chosen workers act together and one
 * transition consumes them all, so the set size K is the router's choice
 * (1..N, differing between rollouts of the same task); router and aggregator
 * outputs are singleton sets. A slot nobody worked on reaches the aggregator
 * as BLANK, so skipping a non-empty slot fails the episode.
 */
export class RoutedWorkflow implements Workflow {
  readonly name = 'routed' as const;
  readonly kind = 'ROUTED' as const;
  readonly roles = ['router', 'worker', 'aggregator'] as const;

  constructor(
    private readonly settings: ArithmeticSettings,
    private readonly rng: SeededRng,
  ) {}

  async play(taskInstanceId: string, groupSize: number, sampler: RoleSampler): Promise<TaskRollouts> {
    const s = this.settings;
    const n = s.workers;
    const task = sampleRoutedTask(this.rng, s);
    const taskId = `routed:${task.slots.map((v) => (v === null ? '_' : String(v))).join(',')}`;
    const episodes = Array.from({ length: groupSize }, (_, g) => episodeIdOf(taskInstanceId, g));
    const routerDraws = await sampler.sample(
      'router',
      episodes.map(() => routerContext(task)),
      n,
    );
    const routers = routerDraws.map((d, g) => toOutput(d, episodes[g], 0, 'router', 'router-0'));
    const choices = routers.map((r) => decodeRouting(r.tokens, n));
    // One batch for every selected worker of every rollout.
    const calls = choices.flatMap((c, g) => c.selected.map((i) => ({ g, i })));
    const workerDraws = await sampler.sample(
      'worker',
      calls.map(({ i }) => workerContext(task, i)),
      1,
    );
    const workers: SampledOutput[][] = episodes.map(() => []);
    calls.forEach(({ g, i }, row) => workers[g].push(toOutput(workerDraws[row], episodes[g], 1, 'worker', `worker-${i}`)));
    const slotValues = choices.map((c, g) => {
      const values = new Array<number>(n).fill(Tok.BLANK);
      c.selected.forEach((i, j) => (values[i] = workers[g][j].tokens[0]));
      return values;
    });
    const aggDraws = await sampler.sample(
      'aggregator',
      slotValues.map((v) => aggregatorContext(v)),
      n,
    );
    const expected = slotsAnswer(task, s);

    const traces = episodes.map((episodeId, g): EpisodeTrace => {
      const router = routers[g];
      const choice = choices[g];
      const routed = routerReward(task, router.tokens, s);
      const graded = choice.selected.map((i, j) => workerReward(task, i, workers[g][j].tokens, s));
      const agg = toOutput(aggDraws[g], episodeId, 2, 'aggregator', 'aggregator-0');
      const aggregated = aggregatorReward(slotValues[g], agg.tokens, s);
      const success = sameTokens(agg.tokens, expected);
      const routeDigest = `route:${choice.selected.join('.')}`;
      const workDigest = `work:${slotValues[g].join('.')}`;
      const finalDigest = `final:${agg.tokens.join('.')}`;
      return {
        episodeId,
        taskId,
        workflow: this.name,
        kind: this.kind,
        steps: [
          {
            step: 0,
            position: 'route',
            preStateId: `${episodeId}:0`,
            consumed: [router],
            reward: routed.reward,
            observationDigest: routeDigest,
            routing: null,
            done: false,
          },
          {
            step: 1,
            position: 'work',
            preStateId: `${episodeId}:1`,
            consumed: workers[g],
            reward: jointReward(graded.map((r) => r.reward)),
            observationDigest: workDigest,
            routing: { routerOutputId: router.outputId, selectedAgentIds: workers[g].map((w) => w.agentId) },
            done: false,
          },
          {
            step: 2,
            position: 'aggregate',
            preStateId: `${episodeId}:2`,
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
            routing: choice.selected.join(','),
            routingCorrect: String(routed.correct),
            routingFallback: String(choice.fallback),
          },
          observationDigests: ['start', routeDigest, workDigest, finalDigest],
          turns: 3,
        },
      };
    });
    return { taskInstanceId, workflow: this.name, groupSize, episodes: traces };
  }
}
