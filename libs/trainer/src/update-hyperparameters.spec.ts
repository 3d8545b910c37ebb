import { ErrorCode, SrpoError } from '@srpo/core';
import { resolveCorrectionConfig, resolveObjectiveConfig } from '@srpo/srpo';
import { decodeJson, encodeJson, type JsonValue } from '@srpo/store';
import {
  hyperparametersJson,
  readHyperparameters,
  readUpdateHyperparameters,
  type LearnerHyperparameters,
  type OfflineHyperparameters,
} from './update-hyperparameters';

/** A learner row exactly as UpdateService wrote it before the run recorder existed (the stored text). */
const LEARNER_ROW =
  '{"objective":{"objective":"srpo","eventReduction":"sqrt","clipLow":0.2,"clipHigh":0.28,"dualClip":true,"clipRatioC":3,"advantageStd":"sample","advantageEps":0.000001,' +
  '"progress":{"enabled":false,"rewardThreshold":0.001,"stdThreshold":0.0001}},"lr":0.0003,"epochs":1,"maxGradNorm":1,"microBatchTokens":0,"maxPolicyLag":4,"setsPerUpdate":16,"temperature":1}';

/** An offline row as runOfflineJob wrote it. */
const OFFLINE_ROW =
  '{"method":"agentbrew-offline","weighting":"credit","trainOn":"policy","creditMode":"best_prefix","maxFailedShare":0.5,"stepRule":{"failedRewardAtMost":0,"byPosition":{"check":0.1}},' +
  '"inferrer":"demo-env","scorer":"scorer@v0","lr":0.001,"steps":20,"batchSize":8,"maxGradNorm":1,"fromMs":1767225600000,"toMs":1767225700000,' +
  '"sourceRanges":{"srpo.agent-outputs":[{"partition":0,"from":0,"to":9}]},"inferredTasksTopic":"srpo.inferred-tasks","actionCreditsTopic":"srpo.action-credits"}';

const row = (text: string) => ({ hyperparameters: decodeJson<Record<string, JsonValue>>(text) });

describe('update hyperparameters', () => {
  it('writes what the learner always wrote, byte for byte, and reads it back', () => {
    const objective = resolveObjectiveConfig({ clipHigh: 0.28 }, 'objective');
    const h: LearnerHyperparameters = {
      objective,
      lr: 3e-4,
      epochs: 1,
      maxGradNorm: 1,
      microBatchTokens: 0,
      maxPolicyLag: 4,
      setsPerUpdate: 16,
      temperature: 1,
    };
    // The hand-built literal UpdateService used before.
    const before = {
      objective: { ...objective, progress: { ...objective.progress } },
      lr: 3e-4,
      epochs: 1,
      maxGradNorm: 1,
      microBatchTokens: 0,
      maxPolicyLag: 4,
      setsPerUpdate: 16,
      temperature: 1,
    };
    expect(encodeJson(hyperparametersJson(h))).toBe(encodeJson(before));
    expect(encodeJson(hyperparametersJson(h))).toBe(LEARNER_ROW);
    expect(readUpdateHyperparameters(row(LEARNER_ROW))).toEqual(h);
  });

  it('round-trips an offline row unchanged and tells it apart', () => {
    const h = readHyperparameters(row(OFFLINE_ROW)) as OfflineHyperparameters;
    expect(h).toMatchObject({
      method: 'agentbrew-offline',
      creditMode: 'best_prefix',
      steps: 20,
      stepRule: { failedRewardAtMost: 0, byPosition: { check: 0.1 } },
    });
    expect(encodeJson(hyperparametersJson(h))).toBe(OFFLINE_ROW);
    // verify and replay refuse it: it is no SRPO step.
    expect(() => readUpdateHyperparameters(row(OFFLINE_ROW))).toThrow(/hyperparameters\.method is "agentbrew-offline": the update was not an SRPO step/);
  });

  it('reads old rows as they were computed: no micro-batching, no dual clip; the learner fields stay absent', () => {
    const h = readUpdateHyperparameters({ hyperparameters: { objective: { objective: 'gspo', clipLow: 0.1 }, lr: 0.01, epochs: 2, maxGradNorm: 0.5 } });
    expect(h).toMatchObject({
      lr: 0.01,
      epochs: 2,
      maxGradNorm: 0.5,
      microBatchTokens: 0,
      objective: { objective: 'gspo', clipLow: 0.1, clipHigh: 0.2, eventReduction: 'sqrt', dualClip: false, clipRatioC: 3 },
    });
    expect('temperature' in h).toBe(false);
    // Written again (a replay of it), it keeps its keys and gains only what the step ran with.
    expect(Object.keys(hyperparametersJson(h))).toEqual(['objective', 'lr', 'epochs', 'maxGradNorm', 'microBatchTokens']);
    const recent = readUpdateHyperparameters({
      hyperparameters: { objective: { objective: 'srpo', dualClip: true, clipRatioC: 4 }, lr: 0.01, epochs: 1, maxGradNorm: 1 },
    });
    expect(recent.objective).toMatchObject({ dualClip: true, clipRatioC: 4 });
  });

  it('records a correction only where it changes the step, and reads it back; absent reads as none', () => {
    const base = readUpdateHyperparameters(row(LEARNER_ROW)) as LearnerHyperparameters;
    expect(base.correction).toBeUndefined();
    // `none` without a penalty is the step without a correction: the row is what it always was.
    expect(encodeJson(hyperparametersJson({ ...base, correction: resolveCorrectionConfig({}) }))).toBe(LEARNER_ROW);
    const tis = resolveCorrectionConfig({ correction: 'tis', cap: 3 });
    const text = encodeJson(hyperparametersJson({ ...base, correction: tis }));
    expect(text).toBe(LEARNER_ROW.slice(0, -1) + ',"correction":{"correction":"tis","cap":3,"bound":0.6931471805599453,"klCoef":0}}');
    expect(readUpdateHyperparameters(row(text)).correction).toEqual(tis);
    const kl = resolveCorrectionConfig({ klCoef: 0.1 });
    expect(readUpdateHyperparameters(row(encodeJson(hyperparametersJson({ ...base, correction: kl })))).correction).toEqual(kl);
  });

  it.each([
    [{ lr: 'fast' }, 'hyperparameters.lr must be a finite number >= 0, recorded "fast"'],
    [{ lr: undefined }, 'hyperparameters.lr is missing'],
    [{ epochs: 0.5 }, 'hyperparameters.epochs must be an integer >= 1, recorded 0.5'],
    [{ maxGradNorm: null }, 'hyperparameters.maxGradNorm is missing'],
    [{ microBatchTokens: -1 }, 'hyperparameters.microBatchTokens must be an integer >= 0, recorded -1'],
    [{ temperature: 'hot' }, 'hyperparameters.temperature must be a finite number >= 0, recorded "hot"'],
    [{ objective: undefined }, 'hyperparameters.objective is missing'],
    [{ objective: { objective: 'ppo' } }, /^hyperparameters\.objective\.objective: expected one of/],
    [{ correction: { correction: 'tis', cap: 0 } }, /^hyperparameters\.correction\.cap: must be >= 1, got 0/],
    [{ method: 'sft' }, 'hyperparameters.method is "sft": the update was not an SRPO step and cannot be recomputed as one'],
  ])('refuses a wrong or missing recorded value, naming the field: %j', (change, message) => {
    const base = decodeJson<Record<string, JsonValue>>(LEARNER_ROW);
    const hyperparameters = { ...base, ...change } as Record<string, JsonValue>;
    for (const k of Object.keys(change)) if ((change as Record<string, unknown>)[k] === undefined) delete hyperparameters[k];
    let error: unknown;
    try {
      readUpdateHyperparameters({ hyperparameters });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(SrpoError);
    expect((error as SrpoError).code).toBe(ErrorCode.INTEGRITY_FAILED);
    if (typeof message === 'string') expect((error as SrpoError).message).toBe(message);
    else expect((error as SrpoError).message).toMatch(message);
  });

  it('refuses an offline row with a wrong field, naming it', () => {
    const bad = { hyperparameters: { ...decodeJson<Record<string, JsonValue>>(OFFLINE_ROW), steps: 'many' } };
    expect(() => readHyperparameters(bad)).toThrow('hyperparameters.steps must be an integer >= 1, recorded "many"');
    expect(() => readHyperparameters({ hyperparameters: { method: 'other' } })).toThrow(/hyperparameters\.method is "other"/);
  });
});
