import { ValidationError } from '@srpo/core';
import { OpenAiError } from '../openai-protocol';

export interface KeyRateLimiterOptions {
  /** Requests per second each key may make on average; 0: no per-key limit. */
  ratePerS: number;
  /** Requests a key may make at once after being idle (the bucket's size). */
  burst: number;
  clock?: () => number;
}

/**
 * A token bucket per API key: each key has its own budget, so one busy client is throttled
 * while the others go on. The buckets are keyed by key id and there is one per configured key,
 * so their number is bounded by the key file.
 */
export class KeyRateLimiter {
  private readonly buckets = new Map<string, { tokens: number; atMs: number }>();
  private readonly clock: () => number;

  constructor(private readonly o: KeyRateLimiterOptions) {
    if (!(o.ratePerS >= 0)) throw new ValidationError('ratePerS', `must be at least 0, got ${o.ratePerS}`);
    if (!(o.burst >= 1)) throw new ValidationError('burst', `must be at least 1, got ${o.burst}`);
    this.clock = o.clock ?? Date.now;
  }

  /** Takes one request from `keyId`'s budget, or refuses with 429 and a `Retry-After` (whole seconds) until a token is back. */
  take(keyId: string): void {
    if (this.o.ratePerS === 0) return;
    const now = this.clock();
    const b = this.buckets.get(keyId) ?? { tokens: this.o.burst, atMs: now };
    b.tokens = Math.min(this.o.burst, b.tokens + (Math.max(0, now - b.atMs) * this.o.ratePerS) / 1000);
    b.atMs = now;
    this.buckets.set(keyId, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return;
    }
    const retryAfterS = Math.max(1, Math.ceil((1 - b.tokens) / this.o.ratePerS));
    throw new OpenAiError(
      429,
      `Rate limit reached for this API key (${this.o.ratePerS} requests/s, bursts of ${this.o.burst}); retry after ${retryAfterS} s.`,
      null,
      'rate_limit_exceeded',
      'rate_limit_error',
    ).withHeaders({ 'retry-after': String(retryAfterS) });
  }
}
