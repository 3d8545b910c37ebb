import { SrpoError, ErrorCode } from './errors';
import { retry, retryDelayMs, RetryStoppedError } from './retry';

const transient = () => new SrpoError(ErrorCode.UNAVAILABLE, 'broker away', { retriable: true });

describe('retry', () => {
  it('waits with exponential backoff, capped, until the call succeeds', async () => {
    const waits: number[] = [];
    let calls = 0;
    const value = await retry(
      async () => {
        calls++;
        if (calls < 6) throw transient();
        return 'done';
      },
      { initialDelayMs: 100, maxDelayMs: 1000, sleep: async (ms) => void waits.push(ms) },
    );
    expect(value).toBe('done');
    expect(calls).toBe(6);
    // 100·2^(n-1) capped at 1000, computed by hand.
    expect(waits).toEqual([100, 200, 400, 800, 1000]);
  });

  it('grows linearly when asked to', () => {
    expect([1, 2, 3, 30].map((n) => retryDelayMs(n, { initialDelayMs: 500, linearStepMs: 500, maxDelayMs: 10_000 }))).toEqual([500, 1000, 1500, 10_000]);
  });

  it('throws a non-retriable failure at once', async () => {
    let calls = 0;
    const fatal = new SrpoError(ErrorCode.CONFIG_INVALID, 'bad config');
    await expect(
      retry(
        async () => {
          calls++;
          throw fatal;
        },
        { sleep: async () => undefined },
      ),
    ).rejects.toBe(fatal);
    expect(calls).toBe(1);
  });

  it('throws the last failure after maxAttempts', async () => {
    let calls = 0;
    await expect(
      retry(
        async (attempt) => {
          calls++;
          throw new SrpoError(ErrorCode.UNAVAILABLE, `attempt ${attempt}`, { retriable: true });
        },
        { maxAttempts: 3, sleep: async () => undefined },
      ),
    ).rejects.toThrow('attempt 3');
    expect(calls).toBe(3);
  });

  it('stops retrying once stopped() turns true, and refuses to start when already stopped', async () => {
    let stopping = false;
    let calls = 0;
    await expect(
      retry(
        async () => {
          calls++;
          throw transient();
        },
        { stopped: () => stopping, sleep: async () => void (stopping = true) },
      ),
    ).rejects.toThrow('broker away');
    expect(calls).toBe(1);
    await expect(retry(async () => 1, { stopped: () => true })).rejects.toBeInstanceOf(RetryStoppedError);
  });

  it('reports each retried failure with its delay', async () => {
    const seen: [number, number][] = [];
    let calls = 0;
    await retry(
      async () => {
        if (++calls < 3) throw transient();
      },
      { initialDelayMs: 10, onRetry: (_e, attempt, delay) => seen.push([attempt, delay]), sleep: async () => undefined },
    );
    expect(seen).toEqual([
      [1, 10],
      [2, 20],
    ]);
  });
});
