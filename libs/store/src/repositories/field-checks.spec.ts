import { expectInvalid } from '../../test/audit-fixtures';
import { checkCoordinates, checkEpochMs, checkLimit, checkNonEmpty, checkNonNegativeInt32, isInt32 } from './field-checks';

describe('field checks', () => {
  it('bounds strings by length, counting from 1', () => {
    expect(checkNonEmpty('abc', 'f', 3)).toBe('abc');
    expectInvalid(() => checkNonEmpty('abcd', 'f', 3), 'f', /at most 3 characters, got 4/);
    expectInvalid(() => checkNonEmpty(7, 'f'), 'f', /non-empty string/);
  });

  it('keeps integer columns within 32 bits, signed where lags go negative', () => {
    expect(checkNonNegativeInt32(2_147_483_647, 'f')).toBe(2_147_483_647);
    expectInvalid(() => checkNonNegativeInt32(2_147_483_648, 'f'), 'f', /non-negative 32-bit integer, got 2147483648/);
    expectInvalid(() => checkNonNegativeInt32('1', 'f'), 'f', /non-negative 32-bit integer/);
    expect([isInt32(-2_147_483_647), isInt32(2_147_483_648), isInt32(1.5), isInt32('1')]).toEqual([true, false, false, false]);
  });

  it('takes epoch ms as non-negative safe integers', () => {
    expect(() => checkEpochMs(0, 'f')).not.toThrow();
    expectInvalid(() => checkEpochMs(Number.MAX_SAFE_INTEGER + 1, 'f'), 'f', /epoch milliseconds/);
  });

  it('checks Kafka coordinates part by part', () => {
    expect(() => checkCoordinates({ topic: 't', partition: 0, offset: 2 ** 40 }, 'c')).not.toThrow();
    expectInvalid(() => checkCoordinates(undefined, 'c'), 'c', /must be \{topic, partition, offset\}/);
    expectInvalid(() => checkCoordinates({ topic: 't'.repeat(256), partition: 0, offset: 0 }, 'c'), 'c.topic', /at most 255 characters/);
    expectInvalid(() => checkCoordinates({ topic: 't', partition: 0.5, offset: 0 }, 'c'), 'c.partition', /non-negative integer/);
  });

  it('takes list limits in [1, max]', () => {
    expect(checkLimit(1, 5)).toBe(1);
    expectInvalid(() => checkLimit(6, 5), 'limit', /must be an integer in \[1, 5\], got 6/);
    expectInvalid(() => checkLimit(Number.NaN, 5), 'limit', /got NaN/);
  });
});
