import { isRetriable } from './errors';

/**
 * How `retry` waits between attempts. The delay before attempt n + 1 is
 * `min(maxDelayMs, initialDelayMs * factor^(n-1))`: exponential by default, linear
 * growth is `factor: 1` with a step (see `linearStepMs`).
 */
export interface RetryOptions {
  /** Delay after the first failure (default 500 ms). */
  initialDelayMs?: number;
  /** Upper bound of any one delay (default 10 s). */
  maxDelayMs?: number;
  /** Growth per attempt (default 2). */
  factor?: number;
  /** Delay grows by this much per attempt instead of geometrically (`initialDelayMs + step * (n-1)`). */
  linearStepMs?: number;
  /** Attempts in all, the first included (default: unbounded). The last failure is thrown. */
  maxAttempts?: number;
  /** Whether a failure is worth another attempt (default `isRetriable`); otherwise it is thrown at once. */
  retryIf?: (error: unknown, attempt: number) => boolean;
  /**
   * Polled before every attempt and after every wait: once true, `retry` stops and throws the
   * last failure (a process shutting down must not keep reconnecting).
   */
  stopped?: () => boolean;
  /** Told of each failure that will be retried, with the delay before the next attempt (for logs and metrics). */
  onRetry?: (error: unknown, attempt: number, delayMs: number) => void;
  /** The wait (a test passes a fake one); default a timer. */
  sleep?: (ms: number) => Promise<void>;
}

/** Thrown by `retry` when `stopped()` was already true before the first attempt. */
export class RetryStoppedError extends Error {
  constructor() {
    super('stopped before the first attempt');
    this.name = 'RetryStoppedError';
  }
}

/** The delay after failed attempt `attempt` (1-based) under `options`. */
export function retryDelayMs(attempt: number, options: RetryOptions = {}): number {
  const initial = options.initialDelayMs ?? 500;
  const max = options.maxDelayMs ?? 10_000;
  const delay = options.linearStepMs !== undefined ? initial + options.linearStepMs * (attempt - 1) : initial * Math.pow(options.factor ?? 2, attempt - 1);
  return Math.min(max, delay);
}

/**
 * The project's one retrier: runs `fn` until it resolves, waiting with backoff after each
 * failure that `retryIf` accepts. Every restart loop (consumer restarts, app start-up while
 * the cluster is away, sink writes) goes through it, so backoff, bounds and shutdown behave
 * the same everywhere.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const retryIf = options.retryIf ?? ((e: unknown) => isRetriable(e));
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const maxAttempts = options.maxAttempts ?? Infinity;
  if (options.stopped?.()) throw new RetryStoppedError();
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (e) {
      if (attempt >= maxAttempts || !retryIf(e, attempt) || options.stopped?.()) throw e;
      const delay = retryDelayMs(attempt, options);
      options.onRetry?.(e, attempt, delay);
      await sleep(delay);
      if (options.stopped?.()) throw e;
    }
  }
}
