import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { ValidationError, initTfBackend } from '@srpo/core';
import {
  behaviourSetWeight,
  DEFAULT_CORRECTION_CONFIG,
  klPenalty,
  maskedSetWeight,
  mismatchDiagnostics,
  resolveCorrectionConfig,
  setBehaviourK3,
  setBehaviourLogRatio,
  setMismatches,
  tokenK3,
  truncatedSetWeight,
  weightedAdvantages,
  type BehaviourMember,
  type CorrectionConfig,
} from './behaviour-correction';
import { DEFAULT_OBJECTIVE_CONFIG } from './config';
import { disposeObjectiveOutput, objectiveLoss } from './objective';
import { buildPaddedSetBatch, disposePaddedSetBatch, padRows } from './padded-batch';

const REFERENCE = path.join(__dirname, '..', 'reference', 'mismatch_reference.py');

// The hand batch. Token log-ratios d = prox − engine over trained tokens:
//   s1 (A = +1,   K = 2): o1 [+0.1, 0], o2 [−0.2]        m = −0.1/3 = −0.0333333
//   s2 (A = −0.5, K = 1): o3 [+1.2] (single token)       m = 1.2
//   s3 (A = +0.4, K = 1): o4 [+0.2, (masked), −0.1]      m = 0.05
//   s4 (A = −1,   K = 1): o5 [−3 − (−9999) = 9996]       m = 9996 (an engine floor log-prob)
const SETS = [
  {
    setId: 's1',
    advantage: 1,
    members: [
      { outputId: 'o1', logpProx: [-1.0, -0.5], logpBehaviour: [-1.1, -0.5], mask: [1, 1], logpNew: [-0.95, -0.55], logpRef: [-1.2, -0.4] },
      { outputId: 'o2', logpProx: [-2.0], logpBehaviour: [-1.8], mask: [1], logpNew: [-2.1], logpRef: [-1.9] },
    ],
  },
  { setId: 's2', advantage: -0.5, members: [{ outputId: 'o3', logpProx: [-0.3], logpBehaviour: [-1.5], mask: [1], logpNew: [-0.2], logpRef: [-0.5] }] },
  {
    setId: 's3',
    advantage: 0.4,
    members: [
      { outputId: 'o4', logpProx: [-0.7, -9, -0.2], logpBehaviour: [-0.9, -1, -0.1], mask: [1, 0, 1], logpNew: [-0.75, -5, -0.15], logpRef: [-0.6, -2, -0.3] },
    ],
  },
  { setId: 's4', advantage: -1, members: [{ outputId: 'o5', logpProx: [-3.0], logpBehaviour: [-9999], mask: [1], logpNew: [-2.9], logpRef: [-3.5] }] },
];
const members = (i: number): BehaviourMember[] => SETS[i].members;

// By hand (exp by series to 7 digits):
//   e^−0.0333333 = 0.9672161, e^1.2 = 3.3201169, e^0.05 = 1.0512711
//   k3 s1: (e^0.1 − 1.1 = 0.0051709) + 0 + (e^−0.2 − 0.8 = 0.0187308) = 0.0239017 / 3 = 0.0079672
//   k3 s2: 3.3201169 − 2.2 = 1.1201169
//   k3 s3: (e^0.2 − 1.2 = 0.0214028) + (e^−0.1 − 0.9 = 0.0048374) = 0.0262402 / 2 = 0.0131201
//   k3 s4: e^44.3614 (saturated at e^(log(float32 max)/2) = √(float32 max) ≈ 1.8446743e19) − 1 − 9996
const HAND = {
  logRatio: [-0.1 / 3, 1.2, 0.05, 9996],
  expM: [0.9672161, 3.3201169, 1.0512711],
  k3: [0.0079672, 1.1201169, 0.0131201, Math.sqrt(3.4028234663852886e38) - 9997],
};

const cfg = (over: Partial<CorrectionConfig>): CorrectionConfig => ({ ...DEFAULT_CORRECTION_CONFIG, ...over });

interface PyOut {
  sets: { logRatio: number; k3: number; weight: number }[];
  loss?: number;
  kl?: number;
  grad?: number[][][];
}

/** Runs the PyTorch reference on a case; a missing torch fails the test with the install command. */
function python(input: unknown): PyOut {
  const r = spawnSync('python3', [REFERENCE], { input: JSON.stringify(input), encoding: 'utf8', timeout: 100_000 });
  if (r.status !== 0) {
    throw new Error(
      `PyTorch reference failed: ${r.error?.message ?? r.stderr.trim().split('\n').slice(-3).join(' | ')}. Install it with: python3 -m pip install -r scripts/reference/requirements.txt`,
    );
  }
  return JSON.parse(r.stdout) as PyOut;
}

beforeAll(async () => {
  await initTfBackend('tensorflow');
});

describe('resolveCorrectionConfig', () => {
  it('gives the documented defaults: none, cap 2, bound ln 2, no KL', () => {
    expect(resolveCorrectionConfig(undefined)).toEqual({ correction: 'none', cap: 2, bound: Math.LN2, klCoef: 0 });
    expect(resolveCorrectionConfig({ correction: 'mis', bound: 0.1 })).toEqual({ correction: 'mis', cap: 2, bound: 0.1, klCoef: 0 });
  });

  it.each([
    [{ correction: 'is' }, 'correction.correction'],
    [{ cap: 0.5 }, 'correction.cap'],
    [{ bound: 0 }, 'correction.bound'],
    [{ klCoef: -1 }, 'correction.klCoef'],
    [{ klCoef: Number.NaN }, 'correction.klCoef'],
    [{ kl: 1 }, 'correction.kl'],
  ])('refuses %j naming %s', (partial, field) => {
    expect(() => resolveCorrectionConfig(partial)).toThrow(ValidationError);
    try {
      resolveCorrectionConfig(partial);
    } catch (e) {
      expect((e as ValidationError).message).toContain(field);
    }
  });
});

describe('set behaviour log-ratio, weights and k3 (by hand)', () => {
  it('m_S is the mean over the set’s trained tokens, all members together; masked tokens are never read', () => {
    HAND.logRatio.forEach((m, i) => expect(setBehaviourLogRatio(members(i))).toBeCloseTo(m, 9));
  });

  it('TIS: min(exp(m), C), truncated where exp(m) > C', () => {
    expect(truncatedSetWeight(HAND.logRatio[0], 2)).toBeCloseTo(HAND.expM[0], 6);
    expect(truncatedSetWeight(1.2, 2)).toBe(2);
    expect(truncatedSetWeight(1.2, 4)).toBeCloseTo(HAND.expM[1], 6);
    expect(truncatedSetWeight(9996, 2)).toBe(2); // exp overflows to ∞ in float64; the cap takes it back
    const w = behaviourSetWeight(1.2, cfg({ correction: 'tis' }));
    expect(w).toEqual({ logRatio: 1.2, weight: 2, truncated: true, masked: false });
  });

  it('MIS: exp(m) within |m| <= B, 0 beyond; NaN is never silently dropped', () => {
    expect(maskedSetWeight(0.05, Math.LN2)).toBeCloseTo(HAND.expM[2], 6);
    expect(maskedSetWeight(1.2, Math.LN2)).toBe(0);
    expect(maskedSetWeight(-1.2, Math.LN2)).toBe(0);
    expect(maskedSetWeight(Math.LN2, Math.LN2)).toBeCloseTo(2, 12); // on the bound: kept
    expect(maskedSetWeight(Number.NaN, 1)).toBeNaN();
    expect(behaviourSetWeight(9996, cfg({ correction: 'mis' }))).toEqual({ logRatio: 9996, weight: 0, truncated: false, masked: true });
  });

  it('none: weight 1 whatever the ratio', () => {
    expect(behaviourSetWeight(9996, cfg({}))).toEqual({ logRatio: 9996, weight: 1, truncated: false, masked: false });
  });

  it('k3 of engine → learner per set, saturated like the reported ratios', () => {
    HAND.k3.slice(0, 3).forEach((k, i) => expect(setBehaviourK3(members(i))).toBeCloseTo(k, 6));
    expect(setBehaviourK3(members(3)) / HAND.k3[3]).toBeCloseTo(1, 12);
    expect(Number.isFinite(setBehaviourK3(members(3)))).toBe(true);
  });

  it('edge cases: no trained token, rows of different length, NaN and ±∞ log-probs', () => {
    expect(() => setBehaviourLogRatio([{ logpProx: [-1], logpBehaviour: [-1], mask: [0] }], 'sets[7]')).toThrow(/sets\[7\].*no trained token/);
    expect(() => setBehaviourLogRatio([], 'sets[0]')).toThrow(ValidationError);
    expect(() => setBehaviourK3([{ logpProx: [-1], logpBehaviour: [-1], mask: [0] }])).toThrow(ValidationError);
    expect(() => setBehaviourLogRatio([{ logpProx: [-1, -2], logpBehaviour: [-1], mask: [1, 1] }], 's')).toThrow(/s\.members\[0\]/);
    expect(setBehaviourLogRatio([{ logpProx: [Number.NaN], logpBehaviour: [-1], mask: [1] }])).toBeNaN();
    // A NaN behind a mask 0 is never read.
    expect(setBehaviourLogRatio([{ logpProx: [-1, Number.NaN], logpBehaviour: [-2, -1], mask: [1, 0] }])).toBe(1);
    // The learner gives a sampled token probability 0: m = −∞, TIS weight 0, MIS masked.
    const minusInf = setBehaviourLogRatio([{ logpProx: [Number.NEGATIVE_INFINITY, -1], logpBehaviour: [-2, -1], mask: [1, 1] }]);
    expect(minusInf).toBe(Number.NEGATIVE_INFINITY);
    expect(behaviourSetWeight(minusInf, cfg({ correction: 'tis' })).weight).toBe(0);
    expect(behaviourSetWeight(minusInf, cfg({ correction: 'mis' })).masked).toBe(true);
    // An engine −∞ (refused upstream by the batch builder, defined here anyway): m = +∞, TIS capped.
    expect(behaviourSetWeight(Number.POSITIVE_INFINITY, cfg({ correction: 'tis' })).weight).toBe(2);
  });
});

describe('weightedAdvantages', () => {
  it('folds w into A and renormalises the mean to the kept sets', () => {
    // MIS on the hand batch: w = [0.9672161, 0, 1.0512711, 0], |B| / |B_kept| = 4 / 2.
    const w = SETS.map((_, i) => behaviourSetWeight(setBehaviourLogRatio(members(i)), cfg({ correction: 'mis' })).weight);
    const a = weightedAdvantages(
      SETS.map((s) => s.advantage),
      w,
    );
    expect(a[0]).toBeCloseTo(0.9672161 * 1 * 2, 6);
    expect(a[1]).toBe(0);
    expect(a[2]).toBeCloseTo(1.0512711 * 0.4 * 2, 6);
    expect(a[3]).toBe(0);
    expect(weightedAdvantages([1, -2], [1, 1])).toEqual([1, -2]);
    expect(weightedAdvantages([1, -2], [0, 0])).toEqual([0, 0]);
    expect(() => weightedAdvantages([1], [-1])).toThrow(/weights\[0\]/);
    expect(() => weightedAdvantages([1], [1, 1])).toThrow(ValidationError);
    expect(weightedAdvantages([1], [Number.NaN])[0]).toBeNaN();
  });

  it('the folded objective equals the weight times the surrogate, the identity it relies on (composite, by value)', () => {
    // w·min(rA, clip(r)A) = min(r·wA, clip(r)·wA), dual clip included: every clip regime once.
    const logRatios = [0.5, -0.5, 0.05, 2.0]; // high clip, low clip, inside, dual clip (A < 0, r > 3)
    const adv = [1, -1, 0.7, -2];
    const w = [1.7, 0.3, 2, 0.6];
    const lossAt = (a: number[]) => {
      // One single-token set per case, logpOld 0 so L = logpNew.
      const batch = buildPaddedSetBatch(a.map((x, i) => ({ setId: `s${i}`, advantage: x, members: [{ outputId: `o${i}`, logpOld: [-1], mask: [1] }] })));
      const out = objectiveLoss(
        tf.tensor2d(
          logRatios.map((l) => l - 1),
          [4, 1],
        ),
        batch,
        DEFAULT_OBJECTIVE_CONFIG,
      );
      const v = out.loss.dataSync()[0];
      disposeObjectiveOutput(out);
      disposePaddedSetBatch(batch);
      return v;
    };
    for (let i = 0; i < 4; i++) {
      const one = adv.map((_, j) => (j === i ? adv[i] : 0));
      const folded = adv.map((_, j) => (j === i ? w[i] * adv[i] : 0));
      expect(lossAt(folded)).toBeCloseTo(w[i] * lossAt(one), 6);
    }
  });
});

describe('tokenK3 and klPenalty (by hand)', () => {
  it('value and gradient: k3 = e^d − d − 1, ∂/∂logπ_θ = (1 − e^d)/N, d = ref − θ', () => {
    const logpNew = tf.tensor2d([[-1, -2]]);
    const ref = tf.tensor2d([[-1.5, -2]]);
    const mask = tf.tensor2d([[1, 1]]);
    // d = −0.5, 0: k3 = e^−0.5 + 0.5 − 1 = 0.1065307, 0; mean 0.0532653.
    expect(klPenalty(logpNew, ref, mask).dataSync()[0]).toBeCloseTo(0.0532653, 6);
    const g = tf
      .grad((x: tf.Tensor) => klPenalty(x as tf.Tensor2D, ref, mask))(logpNew)
      .dataSync();
    expect(g[0]).toBeCloseTo((1 - Math.exp(-0.5)) / 2, 6); // 0.1967347
    expect(g[1]).toBeCloseTo(0, 7);
    tf.dispose([logpNew, ref, mask]);
  });

  it('masked positions: 0, −∞ there reaches neither value nor gradient; NaN in a trained token propagates', () => {
    const logpNew = tf.tensor2d([[-1, Number.NEGATIVE_INFINITY]]);
    const ref = tf.tensor2d([[-1, -3]]);
    const mask = tf.tensor2d([[1, 0]]);
    expect(Array.from(tokenK3(logpNew, ref, mask).dataSync())).toEqual([0, 0]);
    const g = tf
      .grad((x: tf.Tensor) => klPenalty(x as tf.Tensor2D, ref, mask))(logpNew)
      .dataSync();
    expect(Array.from(g)).toEqual([0, 0]);
    expect(klPenalty(tf.tensor2d([[Number.NaN, -1]]), ref, tf.tensor2d([[1, 1]])).dataSync()[0]).toBeNaN();
    tf.dispose([logpNew, ref, mask]);
  });

  it('a policy far below the reference saturates (finite, gradient 0 beyond the bound)', () => {
    const logpNew = tf.tensor2d([[-9999]]);
    const ref = tf.tensor2d([[-1]]);
    const mask = tf.tensor2d([[1]]);
    expect(Number.isFinite(klPenalty(logpNew, ref, mask).dataSync()[0])).toBe(true);
    expect(
      tf
        .grad((x: tf.Tensor) => klPenalty(x as tf.Tensor2D, ref, mask))(logpNew)
        .dataSync()[0],
    ).toBe(0);
    tf.dispose([logpNew, ref, mask]);
  });
});

describe('against the PyTorch reference (float64) on the same batch', () => {
  const objective = { ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress } };

  it.each(['tis', 'mis'] as const)('%s: per-set m, k3, weight; the loss of the corrected step with β·KL and its gradient', (mode) => {
    const correction = cfg({ correction: mode, klCoef: 0.1 });
    const py = python({
      config: { ...objective, ...correction },
      sets: SETS.map((s) => ({ advantage: s.advantage, members: s.members.map(({ logpProx, logpBehaviour, mask }) => ({ logpProx, logpBehaviour, mask })) })),
      logpNew: SETS.map((s) => s.members.map((m) => m.logpNew)),
      logpRef: SETS.map((s) => s.members.map((m) => m.logpRef)),
    });
    const mine = setMismatches(
      SETS.map((s) => s.members),
      correction,
    );
    mine.forEach((m, i) => {
      expect(m.logRatio).toBeCloseTo(py.sets[i].logRatio, 9);
      expect(m.weight).toBeCloseTo(py.sets[i].weight, 9);
      expect(m.k3 / py.sets[i].k3).toBeCloseTo(1, 9);
    });
    const d = mismatchDiagnostics(mine);
    expect(d['mismatch/truncated_frac']).toBe(mode === 'tis' ? 0.5 : 0);
    expect(d['mismatch/masked_frac']).toBe(mode === 'mis' ? 0.5 : 0);
    expect(d['mismatch/log_ratio_max']).toBeCloseTo(9996, 9);
    expect(d['mismatch/log_ratio_mean']).toBeCloseTo((-0.1 / 3 + 1.2 + 0.05 + 9996) / 4, 9);

    // The corrected step as the learner builds it: proximal log-probs as logpOld, w folded into A.
    const advantages = weightedAdvantages(
      SETS.map((s) => s.advantage),
      mine.map((m) => m.weight),
    );
    const batch = buildPaddedSetBatch(
      SETS.map((s, i) => ({
        setId: s.setId,
        advantage: advantages[i],
        members: s.members.map((m) => ({ outputId: m.outputId, logpOld: m.logpProx, mask: m.mask })),
      })),
    );
    const rows = SETS.flatMap((s) => s.members.map((m) => m.logpNew));
    const logpNew = tf.tensor2d(padRows(rows, 3), [5, 3]);
    const ref = tf.tensor2d(
      padRows(
        SETS.flatMap((s) => s.members.map((m) => m.logpRef)),
        3,
      ),
      [5, 3],
    );
    const lossFn = (x: tf.Tensor) => {
      const out = objectiveLoss(x as tf.Tensor2D, batch, objective);
      return tf.add<tf.Scalar>(out.loss, tf.mul(klPenalty(x as tf.Tensor2D, ref, batch.mask), correction.klCoef));
    };
    const { value, grad } = tf.valueAndGrad(lossFn)(logpNew);
    expect(value.dataSync()[0]).toBeCloseTo(py.loss as number, 5);
    const g = grad.arraySync() as number[][];
    let row = 0;
    (py.grad as number[][][]).forEach((set) =>
      set.forEach((memberGrad) => {
        memberGrad.forEach((x, u) => expect(g[row][u]).toBeCloseTo(x, 5));
        row++;
      }),
    );
    const kl = klPenalty(logpNew, ref, batch.mask).dataSync()[0];
    expect(kl).toBeCloseTo(py.kl as number, 6);
    tf.dispose([value, grad, logpNew, ref]);
    disposePaddedSetBatch(batch);
  });
});
