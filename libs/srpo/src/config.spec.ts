import { ValidationError } from '@srpo/core';
import { DEFAULT_OBJECTIVE_CONFIG, dualClipRatio, resolveObjectiveConfig } from './config';

describe('DEFAULT_OBJECTIVE_CONFIG', () => {
  it('holds the contract defaults and cannot be mutated', () => {
    expect(DEFAULT_OBJECTIVE_CONFIG).toEqual({
      objective: 'srpo',
      eventReduction: 'sqrt',
      clipLow: 0.2,
      clipHigh: 0.2,
      dualClip: true,
      clipRatioC: 3,
      advantageStd: 'sample',
      advantageEps: 1e-6,
      progress: { enabled: false, rewardThreshold: 0.001, stdThreshold: 0.0001 },
    });
    expect(Object.isFrozen(DEFAULT_OBJECTIVE_CONFIG)).toBe(true);
    expect(Object.isFrozen(DEFAULT_OBJECTIVE_CONFIG.progress)).toBe(true);
  });
});

describe('resolveObjectiveConfig', () => {
  it('gives a fresh copy of the defaults for undefined, null and {}', () => {
    for (const partial of [undefined, null, {}]) {
      const c = resolveObjectiveConfig(partial);
      expect(c).toEqual(DEFAULT_OBJECTIVE_CONFIG);
      expect(c).not.toBe(DEFAULT_OBJECTIVE_CONFIG);
      expect(c.progress).not.toBe(DEFAULT_OBJECTIVE_CONFIG.progress);
    }
  });

  it('merges given fields, including a partial progress block', () => {
    const c = resolveObjectiveConfig({ objective: 'gspo', eventReduction: 'mean', clipHigh: 0.28, advantageStd: 'population', progress: { enabled: true } });
    expect(c).toEqual({
      objective: 'gspo',
      eventReduction: 'mean',
      clipLow: 0.2,
      clipHigh: 0.28,
      dualClip: true,
      clipRatioC: 3,
      advantageStd: 'population',
      advantageEps: 1e-6,
      progress: { enabled: true, rewardThreshold: 0.001, stdThreshold: 0.0001 },
    });
  });

  it.each([
    [{ objective: 'ppo' }, 'config.objective: expected one of srpo, gspo, grpo-token, srpo-length-norm, got "ppo"'],
    [{ eventReduction: 'max' }, 'config.eventReduction: expected one of sqrt, sum, mean, got "max"'],
    [{ clipLow: 1.5 }, 'config.clipLow: must be in [0, 1], got 1.5'],
    [{ clipLow: '0.2' }, 'config.clipLow: expected a finite number, got "0.2"'],
    [{ clipHigh: -0.1 }, 'config.clipHigh: must be >= 0, got -0.1'],
    [{ clipHigh: Number.NaN }, 'config.clipHigh: expected a finite number, got NaN'],
    [{ dualClip: 'on' }, 'config.dualClip: expected true or false, got "on"'],
    [{ clipRatioC: 1 }, 'config.clipRatioC: must be > 1, got 1'],
    [{ clipRatioC: 0.5 }, 'config.clipRatioC: must be > 1, got 0.5'],
    [{ clipRatioC: Infinity }, 'config.clipRatioC: expected a finite number, got Infinity'],
    [{ clipRatioC: null }, 'config.clipRatioC: missing; expected a finite number'],
    [{ advantageStd: 'unbiased' }, 'config.advantageStd: expected one of sample, population, got "unbiased"'],
    [{ advantageEps: -1 }, 'config.advantageEps: must be >= 0, got -1'],
    [{ progress: true }, 'config.progress: expected an object, got true'],
    [{ progress: { enabled: 'yes' } }, 'config.progress.enabled: expected true or false, got "yes"'],
    [{ progress: { stdThreshold: -1 } }, 'config.progress.stdThreshold: must be >= 0, got -1'],
    [{ progress: { rewardThreshold: Infinity } }, 'config.progress.rewardThreshold: expected a finite number, got Infinity'],
    [{ progress: { minStd: 0.1 } }, 'config.progress.minStd: unknown field; expected one of enabled, rewardThreshold, stdThreshold'],
    [
      { clip_low: 0.1 },
      'config.clip_low: unknown field; expected one of objective, eventReduction, clipLow, clipHigh, dualClip, clipRatioC, advantageStd, advantageEps, progress',
    ],
    ['srpo', 'config: expected an object, got "srpo"'],
    [[1], 'config: expected an object, got an array of length 1'],
  ])('refuses %j with "%s"', (partial, message) => {
    expect(() => resolveObjectiveConfig(partial)).toThrow(ValidationError);
    expect(() => resolveObjectiveConfig(partial)).toThrow(message);
  });

  it('turns the dual clip off or changes its c, and dualClipRatio gives the c the surrogate uses', () => {
    const off = resolveObjectiveConfig({ dualClip: false });
    expect(off).toMatchObject({ dualClip: false, clipRatioC: 3 });
    expect(dualClipRatio(off)).toBeNull();
    const c5 = resolveObjectiveConfig({ clipRatioC: 5 });
    expect(c5).toMatchObject({ dualClip: true, clipRatioC: 5 });
    expect(dualClipRatio(c5)).toBe(5);
    expect(dualClipRatio(DEFAULT_OBJECTIVE_CONFIG)).toBe(3);
  });

  it('uses the given path prefix in messages', () => {
    expect(() => resolveObjectiveConfig({ clipLow: 2 }, 'learner.objective')).toThrow('learner.objective.clipLow: must be in [0, 1], got 2');
  });

  it('puts the field path on the error', () => {
    try {
      resolveObjectiveConfig({ progress: { enabled: 1 } });
      throw new Error('did not throw');
    } catch (e) {
      expect(e).toBeInstanceOf(ValidationError);
      expect((e as ValidationError).field).toBe('config.progress.enabled');
    }
  });
});
