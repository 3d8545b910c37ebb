import { ValidationError } from '@srpo/core';

/**
 * Field checks shared by the repositories' validators. Each throws a
 * {@link ValidationError} naming the field, so a caller learns which part of
 * its input was refused before anything touches the database.
 */

/** policy and update ids (varchar(200)). */
export const MAX_ID_LENGTH = 200;
/** group ids (varchar(512)): materializer group ids embed the group key. */
export const MAX_GROUP_ID_LENGTH = 512;
const INT32_MAX = 2_147_483_647;
const HASH = /^[0-9a-f]{64}$/;

/** Default and maximum `limit` of the update and skipped-group lists. */
export const DEFAULT_LIST_LIMIT = 100;
export const MAX_LIST_LIMIT = 1000;

/**
 * `Array.isArray` for the validators' typed inputs: the standard guard (`arg is any[]`) turns a
 * `readonly T[]` into `any`, which would switch off the type checks on the elements checked next.
 */
export function isArray(v: unknown): v is readonly unknown[] {
  return Array.isArray(v);
}

export function checkNonEmpty(v: unknown, field: string, max = Number.POSITIVE_INFINITY): string {
  if (typeof v !== 'string' || v.length === 0) throw new ValidationError(field, 'must be a non-empty string');
  if (v.length > max) throw new ValidationError(field, `must be at most ${max} characters, got ${v.length}`);
  return v;
}

export function checkId(v: unknown, field: string): string {
  return checkNonEmpty(v, field, MAX_ID_LENGTH);
}

/** Versions, counts and durations stored in `integer` columns. */
export function checkNonNegativeInt32(v: unknown, field: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > INT32_MAX) {
    throw new ValidationError(field, `must be a non-negative 32-bit integer, got ${String(v)}`);
  }
  return v;
}

/** Fits a signed `integer` column (policy lags, which a member from the future makes negative). */
export function isInt32(v: unknown): boolean {
  return typeof v === 'number' && Number.isInteger(v) && Math.abs(v) <= INT32_MAX;
}

export function checkHash(v: unknown, field: string): void {
  if (typeof v !== 'string' || !HASH.test(v))
    throw new ValidationError(field, `must be a SHA-256 hex digest (64 lowercase hex digits), got ${JSON.stringify(v)}`);
}

/** The largest time a JavaScript Date holds (±8.64e15 ms): a later one cannot become a timestamp column. */
const MAX_DATE_MS = 8.64e15;

export function checkEpochMs(v: unknown, field: string): void {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw new ValidationError(field, `must be epoch milliseconds (a non-negative integer), got ${String(v)}`);
  if (v > MAX_DATE_MS) throw new ValidationError(field, `must be at most ${MAX_DATE_MS} (the last time a Date holds), got ${v}`);
}

export function checkFinite(v: unknown, field: string): void {
  // SQLite stores NaN as NULL: a non-finite loss could not be read back as written.
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new ValidationError(field, `must be a finite number, got ${String(v)}`);
}

/** Kafka coordinates `{topic, partition, offset}` as the ledger and skipped rows store them. */
export function checkCoordinates(c: unknown, field: string): void {
  const x = c as { topic?: unknown; partition?: unknown; offset?: unknown } | null;
  if (typeof x !== 'object' || x === null) throw new ValidationError(field, 'must be {topic, partition, offset}');
  checkNonEmpty(x.topic, `${field}.topic`, 255);
  if (typeof x.partition !== 'number' || !Number.isInteger(x.partition) || x.partition < 0) {
    throw new ValidationError(`${field}.partition`, `must be a non-negative integer, got ${String(x.partition)}`);
  }
  if (typeof x.offset !== 'number' || !Number.isSafeInteger(x.offset) || x.offset < 0) {
    throw new ValidationError(`${field}.offset`, `must be a non-negative safe integer, got ${String(x.offset)}`);
  }
}

/** A list query's `limit`: an integer in [1, max]. */
export function checkLimit(limit: number, max: number): number {
  if (!Number.isInteger(limit) || limit < 1 || limit > max) throw new ValidationError('limit', `must be an integer in [1, ${max}], got ${limit}`);
  return limit;
}

/** The optional half-open time range `from <= t < to` of a list query. */
export function checkTimeRange(query: { from?: number; to?: number }): void {
  if (query.from !== undefined) checkEpochMs(query.from, 'from');
  if (query.to !== undefined) checkEpochMs(query.to, 'to');
}
