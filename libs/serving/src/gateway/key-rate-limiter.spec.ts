import type { OpenAiError } from '../openai-protocol';
import { KeyRateLimiter } from './key-rate-limiter';

describe('per-key rate limiter', () => {
  let now = 0;
  const take = (l: KeyRateLimiter, key: string): string => {
    try {
      l.take(key);
      return 'ok';
    } catch (e) {
      const err = e as OpenAiError;
      return `${err.status} retry-after ${err.headers['retry-after']}`;
    }
  };
  beforeEach(() => {
    now = 0;
  });

  it('gives each key a burst, then refuses it with 429 and Retry-After while other keys go on', () => {
    const l = new KeyRateLimiter({ ratePerS: 0.5, burst: 2, clock: () => now });
    expect([take(l, 'a'), take(l, 'a'), take(l, 'a'), take(l, 'b'), take(l, 'b')]).toEqual(['ok', 'ok', '429 retry-after 2', 'ok', 'ok']);
  });

  it('refills at the rate, up to the burst', () => {
    const l = new KeyRateLimiter({ ratePerS: 2, burst: 2, clock: () => now });
    take(l, 'a');
    take(l, 'a');
    expect(take(l, 'a')).toBe('429 retry-after 1');
    now = 500;
    expect([take(l, 'a'), take(l, 'a')]).toEqual(['ok', '429 retry-after 1']);
    now = 60_000;
    expect([take(l, 'a'), take(l, 'a'), take(l, 'a')]).toEqual(['ok', 'ok', '429 retry-after 1']);
  });

  it('0 requests/s: no limit', () => {
    const l = new KeyRateLimiter({ ratePerS: 0, burst: 1, clock: () => now });
    expect(Array.from({ length: 100 }, () => take(l, 'a')).every((r) => r === 'ok')).toBe(true);
  });
});
