import { HttpException, HttpStatus } from '@nestjs/common';

/**
 * Verifications one learner runs at a time. A verify recomputes an update: it rebuilds the
 * checkpoint before it (up to SRPO_CHECKPOINT_KEEP_EVERY − 1 recorded updates when that one was
 * pruned), re-reads the update's source events from Kafka and runs a training step, on the
 * learner's CPU or GPU and beside its own training. One at a time bounds what a reader (or a
 * dashboard clicked repeatedly) can take from training; a second request is refused at once
 * rather than queued, so no HTTP request waits minutes for its turn and a client knows to retry.
 */
export const VERIFY_CONCURRENCY = 1;

/** The 429 a verify gets while the gate is full. */
export class VerifyBusyException extends HttpException {
  constructor(running: readonly string[], limit: number) {
    super(
      {
        statusCode: HttpStatus.TOO_MANY_REQUESTS,
        error: 'Too Many Requests',
        message:
          `${running.length === 1 ? 'a verification is' : `${running.length} verifications are`} already running (${running.join(', ')}); this learner verifies ` +
          `${limit === 1 ? 'one update' : `${limit} updates`} at a time: retry when it has finished`,
      },
      HttpStatus.TOO_MANY_REQUESTS,
    );
  }
}

/**
 * Admits at most `limit` verifications at once and refuses the rest with {@link VerifyBusyException}.
 * One per learner module (provided by a factory: Nest cannot inject the number).
 */
export class VerifyGate {
  /** Update ids being verified; a multiset, since two requests may verify the same update. */
  private readonly running: string[] = [];

  constructor(private readonly limit: number = VERIFY_CONCURRENCY) {}

  /** Runs `verify` if a slot is free (taken before the first await, so concurrent calls cannot both pass). */
  async run<T>(updateId: string, verify: () => Promise<T>): Promise<T> {
    if (this.running.length >= this.limit) throw new VerifyBusyException(this.running, this.limit);
    this.running.push(updateId);
    try {
      return await verify();
    } finally {
      this.running.splice(this.running.indexOf(updateId), 1);
    }
  }

  /** Verifications in progress (for tests and diagnostics). */
  get inFlight(): number {
    return this.running.length;
  }
}
