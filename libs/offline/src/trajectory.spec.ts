import { sampleEvents, sealOutput, type AgentOutput, type EpisodeOutcome, type Transition } from '@srpo/events';
import { assembleTrajectories, exclusionOf, stepSucceeded } from './trajectory';

const base = sampleEvents(0);
const at = (topic: string, offset: number) => ({ topic, partition: 0, offset });

function output(episodeId: string, step: number, agentId: string, role: string, tokens: number[]): AgentOutput {
  return {
    ...base.AgentOutput,
    outputId: `${episodeId}.s${step}.${agentId}`,
    episodeId,
    step,
    agentId,
    role,
    responseTokenIds: tokens,
    behaviourLogProbs: tokens.map(() => -1),
    lossMask: tokens.map(() => true),
  };
}
function transition(episodeId: string, step: number, consumed: string[], reward: number | null): Transition {
  return {
    ...base.Transition,
    transitionId: `${episodeId}.t${step}`,
    episodeId,
    step,
    consumedOutputIds: consumed,
    expectedCardinality: consumed.length,
    reward,
    taskId: 'task-a',
    position: `p${step}`,
  };
}
function outcome(episodeId: string, reward: number, turns: number): EpisodeOutcome {
  return { ...base.EpisodeOutcome, episodeId, taskId: 'task-a', outcomeReward: reward, success: reward > 0, turns };
}

describe('trajectories', () => {
  it('a step fails when its reward (or, without one, the outcome reward) is at most 0', () => {
    expect(stepSucceeded(0, 1)).toBe(false);
    expect(stepSucceeded(0.1, 0)).toBe(true);
    expect(stepSucceeded(null, 1)).toBe(true);
    expect(stepSucceeded(null, 0)).toBe(false);
    expect(stepSucceeded(0.1, 1, { failedRewardAtMost: 0.1 })).toBe(false);
    // Per position: a format bonus of 0.1 fails at `check`, passes elsewhere.
    const rule = { failedRewardAtMost: 0, byPosition: { check: 0.1 } };
    expect(stepSucceeded(0.1, 0, rule, 'check')).toBe(false);
    expect(stepSucceeded(1, 0, rule, 'check')).toBe(true);
    expect(stepSucceeded(0.1, 0, rule, 'solve')).toBe(true);
  });

  it('excludes trajectories with no successful step or too high a failed share', () => {
    expect(exclusionOf([false, false], 0.5)).toBe('no-successful-step');
    // 2 failed of 3 = 0.667 > 0.5
    expect(exclusionOf([true, false, false], 0.5)).toBe('too-many-failed-steps');
    // 1 failed of 2 = 0.5, not above the limit: used
    expect(exclusionOf([true, false], 0.5)).toBeNull();
    expect(exclusionOf([true, false], 0.4)).toBe('too-many-failed-steps');
    expect(exclusionOf([true, true], 0)).toBeNull();
    expect(() => exclusionOf([true], 1.5)).toThrow(/maxFailedShare/);
  });

  it('joins outputs, transitions and outcomes per episode, in step order, and flags failed steps', () => {
    const e = 'ep-1';
    const o0a = output(e, 0, 'worker-0', 'worker', [3]);
    const o0b = output(e, 0, 'worker-1', 'worker', [4]);
    const o1 = output(e, 1, 'aggregator-0', 'aggregator', [3, 4]);
    const { trajectories, incomplete } = assembleTrajectories({
      // Out of order and with a duplicate (a producer retry).
      outputs: [
        { value: o1, source: at('out', 7) },
        { value: o0b, source: at('out', 6) },
        { value: o0a, source: at('out', 5) },
        { value: o0a, source: at('out', 8) },
      ],
      transitions: [
        { value: transition(e, 1, [o1.outputId], 1), source: at('tr', 2) },
        { value: transition(e, 0, [o0a.outputId, o0b.outputId], 0), source: at('tr', 1) },
      ],
      outcomes: [{ value: outcome(e, 1, 2), source: at('oc', 0) }],
    });
    expect(incomplete).toEqual([]);
    expect(trajectories).toHaveLength(1);
    const t = trajectories[0];
    expect(t.actions.map((a) => a.outputId)).toEqual([o0a.outputId, o0b.outputId, o1.outputId]);
    // Step 0 had reward 0: both worker actions failed; step 1 (reward 1) succeeded.
    expect(t.actions.map((a) => a.successful)).toEqual([false, false, true]);
    expect(t.actions[0].source).toEqual(at('out', 5));
    expect(t.actions[2].transitionSource).toEqual(at('tr', 2));
    expect(t.outcome.source).toEqual(at('oc', 0));
    expect(t.positions).toEqual(['p0', 'p1']);
    expect(t.sources).toHaveLength(6);
  });

  it('reports episodes cut by the range as incomplete', () => {
    const o = output('ep-2', 0, 'solver-0', 'solver', [3]);
    const r = assembleTrajectories({
      outputs: [],
      transitions: [
        { value: transition('ep-2', 0, [o.outputId], 1), source: at('tr', 0) },
        { value: transition('ep-3', 0, ['x'], 1), source: at('tr', 1) },
      ],
      outcomes: [{ value: outcome('ep-2', 1, 1), source: at('oc', 0) }],
    });
    expect(r.trajectories).toEqual([]);
    expect(r.incomplete.map((x) => [x.episodeId, x.why])).toEqual([
      ['ep-2', `outputs not in range: ${o.outputId}`],
      ['ep-3', 'no EpisodeOutcome in range'],
    ]);
  });

  it('reports an episode with sealed outputs as incomplete rather than training on empty tokens', () => {
    const o = sealOutput(output('ep-4', 0, 'solver-0', 'solver', [3]), { keyId: 'k', key: Buffer.alloc(32, 1) });
    const r = assembleTrajectories({
      outputs: [{ value: o, source: at('out', 0) }],
      transitions: [{ value: transition('ep-4', 0, [o.outputId], 1), source: at('tr', 0) }],
      outcomes: [{ value: outcome('ep-4', 1, 1), source: at('oc', 0) }],
    });
    expect(r.trajectories).toEqual([]);
    expect(r.incomplete.map((x) => [x.episodeId, x.why])).toEqual([
      ['ep-4', `sealed outputs (offline training reads content in the clear only): ${o.outputId}`],
    ]);
  });
});
