import type { SeededRng } from '@srpo/policy';
import {
  observationDigest,
  observe,
  sampleSearchTask,
  searchContext,
  searchSuccess,
  START_DIGEST,
  type SearchSettings,
  type SearchTurn,
} from '../envs/doc-search.env';
import { episodeIdOf, toOutput, type EpisodeTrace, type RoleSampler, type SampledOutput, type TaskRollouts, type Workflow } from '../rollout';
import { digit, render } from '../tokenizer';

const ANSWER_DIGEST = 'obs:answered';

/**
 * Multi-turn search: a searcher reads documents of a synthetic store, one
 * query per turn, then answers on the last turn. Every turn is a singleton set
 * whose reward is the episode's outcome (1 for the right answer, else 0); the
 * observation after each turn is recorded as a digest, so the materializer can
 * fall back to progress coverage (ProGPO) in groups where every rollout failed.
 * All rollouts run the same number of turns, so every position's group fills by size.
 */
export class SearchWorkflow implements Workflow {
  readonly name = 'search' as const;
  readonly kind = 'SEARCH' as const;
  readonly roles = ['searcher'] as const;

  constructor(
    private readonly settings: SearchSettings,
    private readonly rng: SeededRng,
  ) {}

  async play(taskInstanceId: string, groupSize: number, sampler: RoleSampler): Promise<TaskRollouts> {
    const s = this.settings;
    const task = sampleSearchTask(this.rng, s);
    const taskId = `search:${task.start}:${task.docs.map((d) => d.join('.')).join(',')}`;
    const episodes = Array.from({ length: groupSize }, (_, g) => episodeIdOf(taskInstanceId, g));
    const histories: SearchTurn[][] = episodes.map(() => []);
    const outputs: SampledOutput[][] = episodes.map(() => []);
    const digests: string[][] = episodes.map(() => [START_DIGEST]);
    for (let turn = 0; turn < s.turns; turn++) {
      const draws = await sampler.sample(
        'searcher',
        histories.map((h) => searchContext(task, h)),
        1,
      );
      draws.forEach((d, g) => {
        const out = toOutput(d, episodes[g], turn, 'searcher', 'searcher-0');
        outputs[g].push(out);
        if (turn < s.turns - 1) {
          const observation = observe(task, out.tokens[0]);
          histories[g].push({ query: out.tokens[0], observation });
          digests[g].push(observationDigest(observation));
        } else {
          digests[g].push(ANSWER_DIGEST);
        }
      });
    }
    const traces = episodes.map((episodeId, g): EpisodeTrace => {
      const answer = outputs[g][s.turns - 1].tokens[0];
      const success = searchSuccess(task, answer);
      return {
        episodeId,
        taskId,
        workflow: this.name,
        kind: this.kind,
        steps: outputs[g].map((out, turn) => ({
          step: turn,
          position: `turn${turn}`,
          preStateId: `${episodeId}:${turn}`,
          consumed: [out],
          reward: null,
          observationDigest: digests[g][turn + 1],
          routing: null,
          done: turn === s.turns - 1,
        })),
        outcome: {
          reward: success ? 1 : 0,
          success,
          details: { workflow: this.name, expected: render([digit(task.value)]), answer: render([answer]), queries: render(histories[g].map((h) => h.query)) },
          observationDigests: digests[g],
          turns: s.turns,
        },
      };
    });
    return { taskInstanceId, workflow: this.name, groupSize, episodes: traces };
  }
}
