import { summarise } from './report';
import type { RunResult, StudyObjective } from './train';

function run(objective: StudyObjective, lr: number, seed: number, curve: number[], finalSuccess: number, perK: RunResult['perK'] = {}): RunResult {
  return {
    seed,
    objective,
    lr,
    updates: curve.length,
    epochs: 3,
    lag: 4,
    groupSize: 8,
    tasksPerUpdate: 4,
    evalTasks: 32,
    probeEvery: 5,
    probeSets: 4,
    trainRouter: false,
    curve,
    routeCurve: curve.map(() => 0.6),
    episodeCurve: curve.map((x) => x / 2),
    final: { route: 0.6, work: finalSuccess, success: finalSuccess / 2 },
    finalSuccess,
    clipFrac: 0.1,
    routerClipFrac: 0,
    perK,
    gradNorm: [1],
    seconds: 1,
  };
}

const META = {
  command: 'node run.js',
  date: '2026-12-02',
  minutes: 1,
  cpu: 'test CPU',
  cores: 2,
  warm: [{ seed: 1, steps: 5, routerAccuracy: 0.6, workSuccess: 0.3, success: 0.2 }],
};

describe('SRPO study report', () => {
  it("picks each objective's best lr by mean AUC and pairs the difference by seed", () => {
    // srpo-sqrt: lr 1e-3 AUC (0.5 + 0.7)/2 = 0.6 beats lr 3e-4 (0.2, 0.4 → 0.3).
    // gspo: lr 3e-4 AUC (0.4 + 0.6)/2 = 0.5 beats lr 1e-3 (0.1, 0.1).
    // Constant curves make AUC the constant.
    const rs = [
      run('srpo-sqrt', 3e-4, 1, [0.2, 0.2], 0.3),
      run('srpo-sqrt', 3e-4, 2, [0.4, 0.4], 0.5),
      run('srpo-sqrt', 1e-3, 1, [0.5, 0.5], 0.6),
      run('srpo-sqrt', 1e-3, 2, [0.7, 0.7], 0.9, { '2': { clipFrac: 0.2, gradNorms: [1, 3], logRatioStd: [0.5], sets: 10 } }),
      run('gspo', 3e-4, 1, [0.4, 0.4], 0.5),
      run('gspo', 3e-4, 2, [0.6, 0.6], 0.7),
      run('gspo', 1e-3, 1, [0.1, 0.1], 0.1),
      run('gspo', 1e-3, 2, [0.1, 0.1], 0.1),
    ];
    const { json, markdown } = summarise(rs, META);
    const best = Object.fromEntries(json.best.map((b) => [b.objective, b]));
    expect(best['srpo-sqrt'].lr).toBe(1e-3);
    expect(best.gspo.lr).toBe(3e-4);
    expect(best['srpo-sqrt'].auc.mean).toBeCloseTo(0.6, 12);
    expect(best['srpo-sqrt'].vsReference).toBeNull();
    // gspo − srpo-sqrt per seed: final 0.5 − 0.6 = −0.1, 0.7 − 0.9 = −0.2 → mean −0.15;
    // s = 0.0707107, t_{0.975,1} = 12.706 → half-width 12.706 · 0.0707107 / √2 = 0.6353.
    expect(best.gspo.vsReference?.finalSuccess.mean).toBeCloseTo(-0.15, 12);
    expect(best.gspo.vsReference?.finalSuccess.half).toBeCloseTo(0.6353, 4);
    // Per K, from the seed that had sets of K = 2: sample variance of [1, 3] = 2.
    expect(best['srpo-sqrt'].perK['2']).toEqual({ clipFrac: 0.2, logRatioStd: 0.5, gradNormVariance: 2, gradNormMean: 2, sets: 10 });
    expect(markdown).toContain(
      '| gspo | 0.0003 | 60.0 ± 127.1 % | 50.0 ± 127.1 % | -15.0 ± 63.5 | -10.0 ± 0.0 | success no difference beyond noise; AUC lower |',
    );
  });
});
