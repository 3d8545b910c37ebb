import { Tok } from '../tokenizer';
import { DemoEnvTaskInferrer } from './demo-env.inferrer';
import type { Trajectory, TrajectoryAction } from '@srpo/offline';

const D = (d: number) => Tok.DIGIT0 + d;
const at = { topic: 't', partition: 0, offset: 0 };
const act = (role: string, agentId: string, context: number[], response: number[]): TrajectoryAction => ({
  outputId: `${agentId}`,
  step: 0,
  role,
  agentId,
  policyId: 'p',
  contextTokens: context,
  responseTokens: response,
  successful: true,
  source: at,
  transitionSource: at,
});
const traj = (actions: TrajectoryAction[]): Trajectory => ({
  episodeId: 'e',
  taskId: 'x',
  positions: [],
  actions,
  outcome: { success: false, reward: 0, source: at },
  sources: [],
});

describe('DemoEnvTaskInferrer (hindsight relabelling)', () => {
  it('fixed: relabels with the task the solver answer is right for', async () => {
    const inf = new DemoEnvTaskInferrer({ modulus: 4, reverseLength: 2 });
    // answer [1 3] = reverse(d) - 1 mod 4 -> reverse(d) = [2 0] -> d = [0 2]
    const got = await inf.infer(traj([act('solver', 'solver-0', [Tok.BOS, Tok.SOLVE, D(1), D(1), Tok.SEP], [D(1), D(3)])]));
    expect(got).toEqual({ tokens: [Tok.BOS, Tok.SOLVE, D(0), D(2), Tok.SEP], label: '[BOS SOLVE 0 2 SEP]' });
  });

  it('fixed: an answer with an out-of-range digit, a non-digit or the wrong length fulfils no task', async () => {
    const inf = new DemoEnvTaskInferrer({ modulus: 4, reverseLength: 1 });
    expect(await inf.infer(traj([act('solver', 's', [Tok.BOS], [D(5)])]))).toBeNull();
    expect(await inf.infer(traj([act('solver', 's', [Tok.BOS], [Tok.YES])]))).toBeNull();
    expect(await inf.infer(traj([act('solver', 's', [Tok.BOS], [D(1), D(1)])]))).toBeNull();
    expect(await inf.infer(traj([act('checker', 'c', [Tok.BOS], [Tok.YES])]))).toBeNull();
  });

  it('joint: relabels with the slots the aggregated answer is right for, and gives each worker its slot', async () => {
    const inf = new DemoEnvTaskInferrer({ modulus: 4, reverseLength: 1 });
    // final [0 BLANK]: slot 0 = 0 - 1 mod 4 = 3, slot 1 empty
    const worker1 = act('worker', 'worker-1', [Tok.BOS, Tok.WORK, Tok.SLOT0 + 1, D(2), Tok.SEP], [Tok.BLANK]);
    const aggregator = act('aggregator', 'aggregator-0', [Tok.BOS, Tok.AGG, D(0), Tok.BLANK, Tok.SEP], [D(0), Tok.BLANK]);
    const got = await inf.infer(traj([worker1, aggregator]));
    expect(got?.tokens).toEqual([Tok.BOS, Tok.WORK, D(3), Tok.BLANK, Tok.SEP]);
    const instruction = got as NonNullable<typeof got>;
    expect(inf.trainingContext(instruction, worker1)).toEqual([Tok.BOS, Tok.WORK, Tok.SLOT0 + 1, Tok.BLANK, Tok.SEP]);
    expect(inf.trainingContext(instruction, aggregator)).toEqual(aggregator.contextTokens);
  });
});
