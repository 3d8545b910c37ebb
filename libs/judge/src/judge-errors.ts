import { ErrorCode, SrpoError } from '@srpo/core';

/**
 * Why a judgement gave no reward, as counted by `judge_failures_total{reason}`:
 * - `timeout`: no complete answer within the per-request timeout;
 * - `unreachable`: the connection failed (refused, reset, DNS);
 * - `http`: the endpoint answered with an error status or a body that is not a completion;
 * - `garbage`: an answer without a usable score (or a plugin's reward that is not a finite number);
 * - `plugin`: a reward module threw.
 */
export const JUDGE_FAILURE_REASONS = ['timeout', 'unreachable', 'http', 'garbage', 'plugin'] as const;
export type JudgeFailureReason = (typeof JUDGE_FAILURE_REASONS)[number];

/**
 * A judgement that produced no reward. `retriable` marks the transport failures worth the one
 * retry (a refused or reset connection, 429, 502-504); a timeout is not retried, since a hung
 * judge would hold the partition twice as long.
 */
export class JudgeFailure extends SrpoError {
  constructor(
    readonly reason: JudgeFailureReason,
    message: string,
    options: { retriable?: boolean; status?: number; cause?: unknown } = {},
  ) {
    super(reason === 'garbage' ? ErrorCode.VALIDATION_FAILED : ErrorCode.UNAVAILABLE, message, {
      retriable: options.retriable ?? false,
      cause: options.cause,
      details: options.status === undefined ? undefined : { status: options.status },
    });
  }
}
