import { ErrorCode, SrpoError } from '@srpo/core';
import { DEFAULT_MAX_PROCESSING_ATTEMPTS, ProcessingAttempts } from './processing-attempts';

const at = (offset: number, partition = 0, topic = 'in') => ({ topic, partition, offset });

describe('ProcessingAttempts', () => {
  it('marks a record exhausted after maxAttempts throws, with the last error', () => {
    const attempts = new ProcessingAttempts(3);
    expect(attempts.failed(at(5), 'boom 1')).toBe(1);
    expect(attempts.exhausted(at(5))).toBeUndefined();
    expect(attempts.failed(at(5), 'boom 2')).toBe(2);
    expect(attempts.exhausted(at(5))).toBeUndefined();
    expect(attempts.failed(at(5), 'boom 3')).toBe(3);
    expect(attempts.exhausted(at(5))).toEqual({ attempts: 3, error: 'boom 3' });
  });

  it('counts per record: topic, partition and offset, not globally', () => {
    const attempts = new ProcessingAttempts(2);
    attempts.failed(at(5), 'a');
    attempts.failed(at(6), 'b');
    attempts.failed(at(5, 1), 'c');
    attempts.failed(at(5, 0, 'other'), 'd');
    // Four throws, but no record has two.
    for (const r of [at(5), at(6), at(5, 1), at(5, 0, 'other')]) expect(attempts.exhausted(r)).toBeUndefined();
    attempts.failed(at(6), 'b again');
    expect(attempts.exhausted(at(6))).toEqual({ attempts: 2, error: 'b again' });
    expect(attempts.exhausted(at(5))).toBeUndefined();
  });

  it('forgets records once the committed position passes them, and partitions no longer owned', () => {
    const attempts = new ProcessingAttempts(1);
    attempts.failed(at(5), 'x');
    attempts.failed(at(9), 'y');
    attempts.failed(at(5, 1), 'z');
    attempts.committed('in', 0, 6);
    expect(attempts.exhausted(at(5))).toBeUndefined();
    expect(attempts.exhausted(at(9))).toEqual({ attempts: 1, error: 'y' });
    expect(attempts.exhausted(at(5, 1))).toEqual({ attempts: 1, error: 'z' });
    attempts.retain(new Set([0]));
    expect(attempts.exhausted(at(5, 1))).toBeUndefined();
    expect(attempts.size).toBe(1);
  });

  it('defaults to 3 attempts and refuses fewer than 1', () => {
    expect(new ProcessingAttempts().maxAttempts).toBe(DEFAULT_MAX_PROCESSING_ATTEMPTS);
    expect(DEFAULT_MAX_PROCESSING_ATTEMPTS).toBe(3);
    expect(() => new ProcessingAttempts(0)).toThrow(new SrpoError(ErrorCode.CONFIG_INVALID, 'maxProcessingAttempts: must be an integer >= 1, got 0'));
  });
});
