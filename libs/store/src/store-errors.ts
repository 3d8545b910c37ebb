import { QueryFailedError } from 'typeorm';
import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';

/** The driver's error code (pg's SQLSTATE, better-sqlite3's `SQLITE_*`), if any. */
function driverCode(e: unknown): string | undefined {
  const d = e instanceof QueryFailedError ? (e.driverError as { code?: unknown }) : (e as { code?: unknown } | null);
  return d && typeof d.code === 'string' ? d.code : undefined;
}

/** Unique or primary-key violation on either dialect. */
export function isUniqueViolation(e: unknown): boolean {
  const code = driverCode(e);
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

const TRANSIENT = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'SQLITE_BUSY',
  'SQLITE_LOCKED',
  '57P01',
  '57P02',
  '57P03',
  '53300',
  '40001',
  '40P01',
]);

/**
 * A driver error of the store operation `op` as an {@link SrpoError}:
 * UNAVAILABLE (retriable) when the database could not be reached or was
 * busy, INTEGRITY_FAILED otherwise.
 */
export function dbError(op: string, e: unknown): SrpoError {
  const code = driverCode(e);
  const transient = code !== undefined && (TRANSIENT.has(code) || code.startsWith('08'));
  const message = errorMessage(e);
  if (transient || /Connection terminated|connect ECONNREFUSED|timeout/i.test(message)) {
    return new SrpoError(ErrorCode.UNAVAILABLE, `audit store ${op}: ${message}`, { retriable: true, cause: e, details: { code } });
  }
  // Anything else is a bug or a schema mismatch; keep the driver error for the stack.
  return new SrpoError(ErrorCode.INTEGRITY_FAILED, `audit store ${op} failed: ${message}`, { cause: e, details: { code } });
}
