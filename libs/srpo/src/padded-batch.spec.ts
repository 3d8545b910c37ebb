import * as tf from '@tensorflow/tfjs';
import { ValidationError, initTfBackend } from '@srpo/core';
import { buildPaddedSetBatch, disposePaddedSetBatch, padRows } from './padded-batch';
import type { SetInput } from './padded-batch';

beforeAll(async () => {
  await initTfBackend('tensorflow');
});

const values = (t: tf.Tensor): number[] => Array.from(t.dataSync());

function twoSets(): SetInput[] {
  return [
    {
      setId: 't-17',
      advantage: 0.5,
      members: [
        { outputId: 'o-1', logpOld: [-1.1, -0.4], mask: [1, 1] },
        { outputId: 'o-2', logpOld: [-0.25, -2, -3], mask: [0, 1, 1] },
      ],
    },
    { setId: 't-18', advantage: -1.5, members: [{ outputId: 'o-3', logpOld: [-0.5], mask: [1] }] },
  ];
}

describe('buildPaddedSetBatch', () => {
  it('lays members out row by row, padding with 0 and mask 0', () => {
    const before = tf.memory().numTensors;
    const batch = buildPaddedSetBatch(twoSets());
    try {
      expect(batch.numSets).toBe(2);
      expect(batch.logpOld.shape).toEqual([3, 3]);
      expect(values(batch.logpOld).map((x) => Number(x.toFixed(6)) + 0)).toEqual([-1.1, -0.4, 0, -0.25, -2, -3, -0.5, 0, 0]);
      expect(values(batch.mask)).toEqual([1, 1, 0, 0, 1, 1, 1, 0, 0]);
      expect(batch.memberSet.dtype).toBe('int32');
      expect(values(batch.memberSet)).toEqual([0, 0, 1]);
      expect(values(batch.advantage)).toEqual([0.5, -1.5]);
      expect(batch.layout).toEqual({
        setIds: ['t-17', 't-18'],
        members: [
          { setIndex: 0, outputId: 'o-1', length: 2 },
          { setIndex: 0, outputId: 'o-2', length: 3 },
          { setIndex: 1, outputId: 'o-3', length: 1 },
        ],
        maxTokens: 3,
      });
    } finally {
      disposePaddedSetBatch(batch);
    }
    expect(tf.memory().numTensors).toBe(before);
  });

  it('padRows pads rows to the batch width with the fill value', () => {
    expect(Array.from(padRows([[-1], [-2, -3]], 3, -Infinity))).toEqual([-1, -Infinity, -Infinity, -2, -3, -Infinity]);
  });

  const cases: [string, (s: SetInput[]) => unknown, string][] = [
    ['empty batch', () => [], 'sets: a batch needs at least one set'],
    ['empty set', (s) => ((s[1].members = []), s), 'sets[1] (t-18).members: a set needs at least one member'],
    [
      'missing member',
      (s) => ((s[0].members[1] = null as never), s),
      'sets[0] (t-17).members[1]: missing member; a set with a missing member is refused as a whole',
    ],
    [
      'fewer members than declared',
      (s) => ((s[0].memberCount = 3), s),
      'sets[0] (t-17).members: 2 members present but the set declares memberCount 3; an incomplete set is refused as a whole',
    ],
    ['unequal lengths', (s) => ((s[0].members[1].mask = [1, 1]), s), 'sets[0] (t-17).members[1] (o-2).mask: length 2 differs from logpOld length 3'],
    [
      'empty mask',
      (s) => ((s[1].members[0].mask = [0]), s),
      'sets[1] (t-18).members[0] (o-3).mask: no unmasked token (every entry is 0); each member needs at least one response token',
    ],
    [
      'zero-length member',
      (s) => ((s[1].members[0] = { outputId: 'o-3', logpOld: [], mask: [] }), s),
      'sets[1] (t-18).members[0] (o-3).mask: no unmasked token',
    ],
    ['NaN log-prob', (s) => ((s[0].members[0].logpOld[1] = Number.NaN), s), 'sets[0] (t-17).members[0] (o-1).logpOld[1]: expected a finite number, got NaN'],
    [
      'positive log-prob',
      (s) => ((s[0].members[0].logpOld[0] = 0.1), s),
      'sets[0] (t-17).members[0] (o-1).logpOld[0]: a log-probability must be <= 0, got 0.1',
    ],
    ['non-binary mask', (s) => ((s[0].members[0].mask[0] = 0.5), s), 'sets[0] (t-17).members[0] (o-1).mask[0]: expected 0 or 1, got 0.5'],
    ['NaN advantage', (s) => ((s[1].advantage = Number.NaN), s), 'sets[1] (t-18).advantage: expected a finite number, got NaN'],
    ['duplicate set', (s) => ((s[1].setId = 't-17'), s), 'sets[1] (t-17).setId: duplicate of sets[0]'],
    ['duplicate output', (s) => ((s[0].members[1].outputId = 'o-1'), s), 'sets[0] (t-17).members[1] (o-1).outputId: duplicate of members[0]'],
  ];

  it.each(cases)('refuses %s, naming set, member and field', (_name, corrupt, message) => {
    const before = tf.memory().numTensors;
    const input = corrupt(twoSets()) as SetInput[];
    expect(() => buildPaddedSetBatch(input)).toThrow(ValidationError);
    expect(() => buildPaddedSetBatch(input)).toThrow(message);
    // Refused before any tensor is made.
    expect(tf.memory().numTensors).toBe(before);
  });
});
