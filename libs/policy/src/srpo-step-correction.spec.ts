import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { weightsHash } from './checkpoint-store';
import { tokenLogProbs } from './log-probs';
import { Policy } from './policy';
import { SrpoTrainer, type ActiveSet, type SrpoTrainerConfig } from './srpo-step';
import { makeSets, nativeBackend, TINY } from './test/fixtures';

/**
 * The engine/learner mismatch correction in the trainer (docs/objective.md, section 7): the
 * corrected step must be exactly a plain step whose behaviour log-probs are the learner's own
 * (proximal) ones and whose advantages carry the set weights, computed here independently of
 * @srpo/srpo's functions.
 */

/** The engine's log-probs: the policy's own, shifted per set (an engine that disagrees by a known amount). */
const SHIFT = [0.3, 1.0, 0, -0.05];

function withEngineGap(sets: ActiveSet[]): ActiveSet[] {
  return sets.map((s, i) => ({ ...s, members: s.members.map((m) => ({ ...m, logpOld: m.logpOld.map((x) => x - SHIFT[i]) })) }));
}

/** The learner's log-probs of every member, scored in one batch as the trainer scores them. */
async function proximal(policy: Policy, sets: ActiveSet[]): Promise<number[][]> {
  const members = sets.flatMap((s) => s.members);
  const { logProbs, mask } = tokenLogProbs(policy.model, members);
  const rows = (await logProbs.array()).map((r, j) => r.slice(0, members[j].responseTokens.length));
  tf.dispose([logProbs, mask]);
  return rows;
}

/** m_S = mean over the set's tokens of (proximal − engine), written out. */
function setLogRatios(sets: ActiveSet[], prox: number[][]): number[] {
  let row = 0;
  return sets.map((s) => {
    let sum = 0;
    let n = 0;
    for (const m of s.members) {
      const p = prox[row++];
      m.logpOld.forEach((x, u) => {
        sum += p[u] - x;
        n++;
      });
    }
    return sum / n;
  });
}

/** The same sets with the proximal log-probs as behaviour and advantages A·w·scale. */
function plainEquivalent(sets: ActiveSet[], prox: number[][], weights: number[], scale: number): ActiveSet[] {
  let row = 0;
  return sets.map((s, i) => ({
    ...s,
    advantage: weights[i] === 0 ? 0 : weights[i] * s.advantage * scale,
    members: s.members.map((m) => ({ ...m, logpOld: prox[row++] })),
  }));
}

async function train(seed: number, sets: ActiveSet[], config: SrpoTrainerConfig) {
  const policy = Policy.create('p', TINY, seed);
  const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 3e-3 }, maxGradNorm: 0, ...config });
  try {
    const result = await trainer.update(sets);
    // Adam's first moment after one step is (1 − β₁)·g: the gradient itself, before Adam's normalisation.
    const moments = [...(await trainer.optimizer.getState()).m.values()].flatMap((x) => Array.from(x));
    return { result, hash: await weightsHash(policy), moments };
  } finally {
    trainer.dispose();
    policy.dispose();
  }
}

describe('SrpoTrainer with an engine/learner mismatch correction', () => {
  beforeAll(nativeBackend);

  let engine: ActiveSet[];
  let prox: number[][];
  let m: number[];

  beforeAll(async () => {
    const policy = Policy.create('p', TINY, 11);
    const sets = await makeSets(policy, 21, 4);
    prox = await proximal(policy, sets);
    policy.dispose();
    engine = withEngineGap(sets);
    m = setLogRatios(engine, prox);
  });

  it('the engine gap is what the fixture put there (the proximal log-probs are the policy’s own)', () => {
    m.forEach((x, i) => expect(x).toBeCloseTo(SHIFT[i], 5));
  });

  it('tis: the ratio is against the learner (exactly 1 in the first epoch), and the step is the plain step on proximal log-probs with A·min(e^m, C)', async () => {
    const corrected = await train(11, engine, { correction: { correction: 'tis', cap: 2 } });
    const d = corrected.result.diagnostics;
    expect(d['ratio/min']).toBe(1);
    expect(d['ratio/max']).toBe(1);
    // e^0.3 = 1.35, e^1 = 2.72 → 2 (truncated), e^0 = 1, e^−0.05 = 0.95.
    expect(d['mismatch/truncated_frac']).toBe(0.25);
    expect(d['mismatch/masked_frac']).toBe(0);
    expect(d['mismatch/log_ratio_max']).toBeCloseTo(1, 5);
    const w = m.map((x) => Math.min(Math.exp(x), 2));
    expect(d['mismatch/weight_mean']).toBeCloseTo((w[0] + w[1] + w[2] + w[3]) / 4, 9);
    const plain = await train(11, plainEquivalent(engine, prox, w, 1), {});
    expect(corrected.hash).toBe(plain.hash);
    expect(corrected.result.loss).toBe(plain.result.loss);
    // And the correction did something: the uncorrected step on the engine's log-probs lands elsewhere.
    expect((await train(11, engine, {})).hash).not.toBe(corrected.hash);
  });

  it('mis: the set beyond the bound is dropped and the rest train as if it were not in the batch', async () => {
    const corrected = await train(11, engine, { correction: { correction: 'mis', bound: 0.5 } });
    expect(corrected.result.diagnostics['mismatch/masked_frac']).toBe(0.25);
    const w = m.map((x) => (Math.abs(x) <= 0.5 ? Math.exp(x) : 0));
    const kept = [0, 2, 3];
    const plain = await train(
      11,
      kept.map((i) => plainEquivalent(engine, prox, w, 1)[i]),
      {},
    );
    // Mean over the 3 kept sets either way; float32 rounding of A·w·4/3 against a mean over 3 differs in the
    // last bits, so the gradients (Adam's first moments) are compared to float32 precision, not the weights
    // (Adam's first step is about lr·sign(g), which amplifies rounding in components near 0).
    const scale = Math.max(...plain.moments.map(Math.abs));
    expect(scale).toBeGreaterThan(0);
    const worst = corrected.moments.reduce((w, x, i) => Math.max(w, Math.abs(x - plain.moments[i])), 0);
    expect(worst).toBeLessThan(1e-5 * scale);
    expect(corrected.result.loss).toBeCloseTo(plain.result.loss, 6);
    // Without the drop, the gradient is another one.
    const all = await train(11, plainEquivalent(engine, prox, m.map(Math.exp), 1), {});
    expect(all.moments.reduce((w, x, i) => Math.max(w, Math.abs(x - plain.moments[i])), 0)).toBeGreaterThan(1e-3 * scale);
  });

  it('with micro-batches the proximal log-probs are scored as the step scores them: the ratio is still exactly 1', async () => {
    const corrected = await train(11, engine, { correction: { correction: 'tis' }, microBatchTokens: 24 });
    expect(corrected.result.diagnostics['memory/micro_batches']).toBeGreaterThan(1);
    expect(corrected.result.diagnostics['ratio/min']).toBe(1);
    expect(corrected.result.diagnostics['ratio/max']).toBe(1);
  });

  it('with micro-batches the corrected first epoch reuses the proximal pass as its first forward pass, and steps as the plain micro-batched step does', async () => {
    // Forward passes counted on the model: proximal + step 3's per micro-batch, not step 1's again.
    const count = async (sets: ActiveSet[], config: SrpoTrainerConfig) => {
      const policy = Policy.create('p', TINY, 11);
      const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 3e-3 }, maxGradNorm: 0, microBatchTokens: 24, ...config });
      const spy = jest.spyOn(policy.model, 'logits2d');
      try {
        const result = await trainer.update(sets);
        return { calls: spy.mock.calls.length, micro: result.diagnostics['memory/micro_batches'], hash: await weightsHash(policy) };
      } finally {
        spy.mockRestore();
        trainer.dispose();
        policy.dispose();
      }
    };
    const w = m.map((x) => Math.min(Math.exp(x), 2));
    const corrected = await count(engine, { correction: { correction: 'tis', cap: 2 } });
    const plain = await count(plainEquivalent(engine, prox, w, 1), {});
    expect(corrected.micro).toBeGreaterThan(1);
    // Plain: step 1 and step 3, one pass per micro-batch each. Corrected: the proximal pass and step 3.
    expect(plain.calls).toBe(2 * plain.micro);
    expect(corrected.calls).toBe(2 * corrected.micro);
    expect(corrected.hash).toBe(plain.hash);
  });

  it('over several epochs the proximal policy stays the one the call started from', async () => {
    const r = (await train(11, engine, { correction: { correction: 'tis' }, epochs: 2 })).result;
    expect(r.epochs[0].diagnostics['ratio/max']).toBe(1);
    expect(r.epochs[1].diagnostics['ratio/max']).not.toBe(1);
    expect(r.epochs[1].diagnostics['mismatch/log_ratio_max']).toBe(r.epochs[0].diagnostics['mismatch/log_ratio_max']);
  });

  it('refuses a KL penalty without a reference policy, and a bad correction, naming the field', () => {
    const policy = Policy.create('p', TINY, 1);
    try {
      expect(() => new SrpoTrainer(policy, { correction: { klCoef: 0.1 } })).toThrow(ValidationError);
      expect(() => new SrpoTrainer(policy, { correction: { klCoef: 0.1 } })).toThrow(/config\.correction\.klCoef/);
      expect(() => new SrpoTrainer(policy, { correction: { cap: 0 } })).toThrow(/config\.correction\.cap/);
    } finally {
      policy.dispose();
    }
  });
});
