import { EventCodec, sampleEvents, topicCatalog, validateActionCredit, validateInferredTask } from '@srpo/events';
import { inferredTaskEvents, partitionFor } from './offline-events';

describe('offline events', () => {
  const s = sampleEvents(2);

  it('round-trip through the codec and have their own topics', () => {
    const codec = new EventCodec();
    expect(codec.decodeAs('InferredTask', codec.encode('InferredTask', s.InferredTask, { strict: true }))).toEqual(s.InferredTask);
    expect(codec.decodeAs('ActionCredit', codec.encode('ActionCredit', s.ActionCredit, { strict: true }))).toEqual(s.ActionCredit);
    const c = topicCatalog({ prefix: 'x.' });
    expect([c.inferredTasks.name, c.actionCredits.name]).toEqual(['x.inferred-tasks', 'x.action-credits']);
    expect(c.all()).toContain(c.inferredTasks);
  });

  it('refuse a failed action with credit, an out-of-range weight, and an unusable task without a reason', () => {
    expect(() => validateActionCredit(s.ActionCredit)).not.toThrow();
    expect(() => validateActionCredit({ ...s.ActionCredit, successful: false, prefixIndex: null, credit: 0.5, weight: 0 })).toThrow(
      /ActionCredit\.credit: must be 0 for a failed action/,
    );
    expect(() => validateActionCredit({ ...s.ActionCredit, weight: 1.5 })).toThrow(/ActionCredit\.weight/);
    expect(() => validateActionCredit({ ...s.ActionCredit, creditMode: 'sum' })).toThrow(/ActionCredit\.creditMode/);
    expect(() => validateInferredTask(s.InferredTask)).not.toThrow();
    expect(() => validateInferredTask({ ...s.InferredTask, usable: false, excludedReason: null })).toThrow(/InferredTask\.excludedReason/);
  });

  it('list episodes cut by the range and episodes whose sealed content did not open, each with its own reason', () => {
    const ctx = { runId: 'r', inferrer: 'env', creditMode: 'adjacent' as const, scorerPolicyId: 'p', scorerVersion: 0, eventTimeMs: 5 };
    const src = [{ topic: 't', partition: 0, offset: 1 }];
    const tasks = inferredTaskEvents(
      ctx,
      [],
      [{ episodeId: 'cut', taskId: 'a', sources: src, why: 'no EpisodeOutcome in range' }],
      [{ episodeId: 'gone', taskId: 'b', sources: src, reason: 'erased-content', outputIds: ['gone/o1'], why: 'content keys erased of outputs gone/o1' }],
    );
    expect(tasks.map((t) => [t.episodeId, t.originalTaskId, t.usable, t.excludedReason])).toEqual([
      ['cut', 'a', false, 'incomplete-episode'],
      ['gone', 'b', false, 'erased-content'],
    ]);
    for (const t of tasks) expect(() => validateInferredTask(t)).not.toThrow();
  });

  it('keeps every event of an episode on one partition', () => {
    expect(partitionFor('ep-1', 3)).toBe(partitionFor('ep-1', 3));
    expect(partitionFor('ep-1', 1)).toBe(0);
    const spread = new Set(Array.from({ length: 50 }, (_, i) => partitionFor(`ep-${i}`, 3)));
    expect(spread).toEqual(new Set([0, 1, 2]));
  });
});
