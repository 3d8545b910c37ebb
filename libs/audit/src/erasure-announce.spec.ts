import { MAX_ERASURE_KEY_IDS, sampleEvents, validateErasure } from '@srpo/events';
import { erasureEvents } from './erasure-announce';

describe('the Erasure event', () => {
  const record = (n: number) => ({
    erasureId: 'er-1',
    scope: 'subject' as const,
    target: 'bob',
    keyIds: Array.from({ length: n }, (_, i) => `ck-${i}`),
    erasedAtMs: 1_767_225_600_000,
  });

  it('announces a recorded erasure as one event, or several of the same id past 10,000 key ids, with every id once', () => {
    expect(erasureEvents(record(0))).toEqual([{ erasureId: 'er-1', scope: 'subject', target: 'bob', keyIds: [], eventTimeMs: 1_767_225_600_000 }]);
    expect(erasureEvents(record(3)).map((e) => e.keyIds)).toEqual([['ck-0', 'ck-1', 'ck-2']]);
    const split = erasureEvents(record(MAX_ERASURE_KEY_IDS * 2 + 1));
    expect(split.map((e) => e.keyIds.length)).toEqual([10_000, 10_000, 1]);
    expect(new Set(split.map((e) => e.erasureId))).toEqual(new Set(['er-1']));
    expect(split.flatMap((e) => e.keyIds)).toEqual(record(20_001).keyIds);
  });

  it('refuses an erasure event that names no valid scope, too many key ids, or an empty one, naming the field', () => {
    const e = sampleEvents(0).Erasure;
    expect(() => validateErasure(e)).not.toThrow();
    expect(() => validateErasure({ ...e, scope: 'user' as 'subject' })).toThrow(/Erasure\.scope/);
    expect(() => validateErasure({ ...e, keyIds: Array.from({ length: 10_001 }, (_, i) => `k${i}`) })).toThrow(/Erasure\.keyIds: must list at most 10000/);
    expect(() => validateErasure({ ...e, keyIds: ['ok', ''] })).toThrow(/Erasure\.keyIds\[1\]/);
    expect(() => validateErasure({ ...e, target: '' })).toThrow(/Erasure\.target/);
    expect(() => validateErasure({ ...e, eventTimeMs: -1 })).toThrow(/Erasure\.eventTimeMs/);
  });
});
