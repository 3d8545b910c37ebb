import { learningRateAt, validateLrSchedule, type LrSchedule } from './lr-schedule';

describe('learning-rate schedules', () => {
  it('constant stays constant', () => {
    const s: LrSchedule = { kind: 'constant', lr: 3e-4 };
    expect([0, 1, 1000].map((t) => learningRateAt(s, t))).toEqual([3e-4, 3e-4, 3e-4]);
  });

  it('warmup-cosine ramps linearly, peaks, follows the cosine and floors at minLr', () => {
    const s: LrSchedule = { kind: 'warmup-cosine', peakLr: 1e-3, warmupSteps: 4, totalSteps: 14, minLr: 1e-4 };
    expect(learningRateAt(s, 0)).toBeCloseTo(2.5e-4, 12);
    expect(learningRateAt(s, 3)).toBeCloseTo(1e-3, 12);
    expect(learningRateAt(s, 4)).toBeCloseTo(1e-3, 12);
    expect(learningRateAt(s, 9)).toBeCloseTo(1e-4 + 0.5 * 9e-4, 12);
    expect(learningRateAt(s, 14)).toBeCloseTo(1e-4, 12);
    expect(learningRateAt(s, 100)).toBeCloseTo(1e-4, 12);
    for (let t = 4; t < 14; t++) expect(learningRateAt(s, t + 1)).toBeLessThan(learningRateAt(s, t));
  });

  it('validates and names the field', () => {
    expect(() => validateLrSchedule({ kind: 'constant', lr: -1 })).toThrow(/schedule.lr/);
    expect(() => validateLrSchedule({ kind: 'warmup-cosine', peakLr: 1, warmupSteps: 5, totalSteps: 2 })).toThrow(/schedule.totalSteps/);
    expect(() => validateLrSchedule({ kind: 'warmup-cosine', peakLr: 1, warmupSteps: 0, totalSteps: 2, minLr: 2 })).toThrow(/schedule.minLr/);
    expect(() => validateLrSchedule({ kind: 'linear' } as unknown as LrSchedule)).toThrow(/schedule.kind/);
  });
});
