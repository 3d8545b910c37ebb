import { Tok } from '../tokenizer';
import { brewTrajectory, trainingExamples } from '@srpo/offline';
import { DemoEnvTaskInferrer } from './demo-env.inferrer';
import type { NllCurveScorer } from '@srpo/offline';
import type { Trajectory, TrajectoryAction } from '@srpo/offline';

const D = (d: number) => Tok.DIGIT0 + d;
const at = (offset: number) => ({ topic: 't', partition: 0, offset });

function action(outputId: string, step: number, role: string, context: number[], response: number[], successful: boolean): TrajectoryAction {
  return {
    outputId,
    step,
    role,
    agentId: `${role}-0`,
    policyId: 'p',
    contextTokens: context,
    responseTokens: response,
    successful,
    source: at(step),
    transitionSource: at(100 + step),
  };
}

function trajectory(actions: TrajectoryAction[]): Trajectory {
  return {
    episodeId: 'ep-1',
    taskId: 'fixed:reverse:2',
    positions: ['solve', 'check'],
    actions,
    outcome: { success: false, reward: 0, source: at(200) },
    sources: [],
  };
}

/** Returns a scripted curve and remembers what it was shown. */
class ScriptedScorer implements NllCurveScorer {
  shown: number[][][] = [];
  constructor(private readonly curve: number[]) {}
  async nllCurve(_instruction: readonly number[], actions: readonly (readonly number[])[]): Promise<number[]> {
    this.shown.push(actions.map((a) => [...a]));
    return this.curve.slice(0, actions.length + 1);
  }
}

describe('brewTrajectory', () => {
  const inferrer = new DemoEnvTaskInferrer({ modulus: 4, reverseLength: 1 });
  // Solver answered 3 (a wrong but well-formed answer to task 2), a failed junk step, then the checker said YES.
  const solver = action('s', 0, 'solver', [Tok.BOS, Tok.SOLVE, D(2), Tok.SEP], [D(3)], true);
  const junk = action('j', 1, 'checker', [Tok.BOS, Tok.CHECK, D(3), Tok.SEP], [Tok.ROUTE], false);
  const checker = action('c', 2, 'checker', [Tok.BOS, Tok.CHECK, D(3), Tok.SEP], [Tok.YES], true);

  it('infers from successful actions only, shows the scorer only those, and gives failed actions credit 0', async () => {
    // L_{-1} = 2.0, L_1 = 0.5, L_2 = 0.8
    const scorer = new ScriptedScorer([2.0, 0.5, 0.8]);
    const b = await brewTrajectory(trajectory([solver, junk, checker]), inferrer, scorer, { creditMode: 'adjacent', maxFailedShare: 0.5 });
    expect(b.exclusion).toBeNull();
    // answer 3 fulfils the task whose digit is 3 + 1 mod 4 = 0: [BOS SOLVE 0 SEP]
    expect(b.instruction?.tokens).toEqual([Tok.BOS, Tok.SOLVE, D(0), Tok.SEP]);
    expect(scorer.shown).toEqual([[[D(3)], [Tok.YES]]]);
    // adjacent: solver 2.0 - 0.5 = 1.5; checker 0.5 - 0.8 = -0.3; junk 0
    expect(b.actions.map((c) => c.credit)).toEqual([1.5, 0, 0.5 - 0.8]);
    expect(b.actions.map((c) => c.prefixIndex)).toEqual([1, null, 2]);
    expect(b.actions.map((c) => c.nllBefore)).toEqual([2.0, null, 0.5]);
    expect(b.actions.map((c) => c.nllAfter)).toEqual([0.5, null, 0.8]);
    // weights: max(1.5,0)/1.5 = 1, 0, max(-0.3,0)/1.5 = 0
    expect(b.actions.map((c) => c.weight)).toEqual([1, 0, 0]);
  });

  it('best_prefix measures the second action from B', async () => {
    // L = [2.0, 2.4, 1.0]: c_1 = 2.0 - 2.4 = -0.4 (B stays 2.0); c_2 = 2.0 - 1.0 = 1.0
    const b = await brewTrajectory(trajectory([solver, checker]), inferrer, new ScriptedScorer([2.0, 2.4, 1.0]), {
      creditMode: 'best_prefix',
      maxFailedShare: 0.5,
    });
    expect(b.actions.map((c) => c.credit)).toEqual([2.0 - 2.4, 1.0]);
    expect(b.actions.map((c) => c.nllBefore)).toEqual([2.0, 2.0]);
    expect(b.actions.map((c) => c.weight)).toEqual([0, 1]);
  });

  it('does not use a trajectory with no successful step or too many failed ones, and never scores it', async () => {
    const scorer = new ScriptedScorer([1, 1, 1]);
    const none = await brewTrajectory(trajectory([{ ...solver, successful: false }, junk]), inferrer, scorer, { creditMode: 'adjacent', maxFailedShare: 0.5 });
    expect(none.exclusion).toBe('no-successful-step');
    // 2 failed of 3 > 0.5
    const many = await brewTrajectory(trajectory([solver, junk, { ...junk, outputId: 'j2' }]), inferrer, scorer, {
      creditMode: 'adjacent',
      maxFailedShare: 0.5,
    });
    expect(many.exclusion).toBe('too-many-failed-steps');
    expect(many.actions).toEqual([]);
    expect(scorer.shown).toEqual([]);
    expect(trainingExamples([none, many], inferrer, 'uniform')).toEqual([]);
  });

  it('does not use a trajectory whose successful steps fulfil no task', async () => {
    // The solver step failed (dropped), so only the checker is left: no solver answer to relabel with.
    const b = await brewTrajectory(trajectory([{ ...solver, successful: false }, checker]), inferrer, new ScriptedScorer([1, 1]), {
      creditMode: 'adjacent',
      maxFailedShare: 0.5,
    });
    expect(b.exclusion).toBe('no-instruction');
  });

  it('builds examples on the relabelled prompt: credit weights or uniform 1, failed actions left out', async () => {
    const b = await brewTrajectory(trajectory([solver, junk, checker]), inferrer, new ScriptedScorer([2.0, 0.5, 0.8]), {
      creditMode: 'adjacent',
      maxFailedShare: 0.5,
    });
    const credit = trainingExamples([b], inferrer, 'credit');
    expect(credit).toEqual([
      { contextTokens: [Tok.BOS, Tok.SOLVE, D(0), Tok.SEP], responseTokens: [D(3)], weight: 1 },
      { contextTokens: checker.contextTokens, responseTokens: [Tok.YES], weight: 0 },
    ]);
    expect(trainingExamples([b], inferrer, 'uniform').map((e) => e.weight)).toEqual([1, 1]);
    // Only the trained policy's actions: here the checker's.
    expect(trainingExamples([b], inferrer, 'uniform', (a) => a.role === 'checker').map((e) => e.responseTokens)).toEqual([[Tok.YES]]);
  });
});
