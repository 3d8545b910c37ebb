import { ValidationError } from '@srpo/core';

/**
 * Shared input checks for the host-side entry points (batch building, advantages,
 * the audit request). Every failure is a {@link ValidationError} whose field is the
 * full path with ids, so one line tells an operator which record to open:
 * `sets[0] (t-17).members[1] (o-2).mask: length 3 differs from logpNew length 2`.
 */

/** Longest id echoed into a message; longer ids are cut so a message stays one readable line. */
const MAX_ID_CHARS = 80;

/** Renders a value for an error message on one line, whatever it is. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'number') return String(value); // JSON.stringify would print NaN as null
  if (typeof value === 'string') return JSON.stringify(value.length > MAX_ID_CHARS ? value.slice(0, MAX_ID_CHARS) + '…' : value);
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (typeof value === 'object' && value !== null) return 'an object';
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- what is left is a boolean, bigint, symbol, undefined or a function
  return String(value);
}

function idLabel(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0) return '';
  const shown = id.length > MAX_ID_CHARS ? id.slice(0, MAX_ID_CHARS) + '…' : id;
  // Quote ids that would make the path ambiguous or span lines.
  return /^[\w./:@#+-]+$/.test(shown) ? ` (${shown})` : ` (${JSON.stringify(shown)})`;
}

/** `sets[3] (t-17)`; the id part is left out when the set has no usable id. */
export function setPath(index: number, setId: unknown, root = 'sets'): string {
  return `${root}[${index}]${idLabel(setId)}`;
}

/** `sets[3] (t-17).members[1] (o-2)`. */
export function memberPath(parent: string, index: number, outputId: unknown): string {
  return `${parent}.members[${index}]${idLabel(outputId)}`;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function requireRecord(value: unknown, field: string, what: string): Record<string, unknown> {
  if (value === undefined || value === null) throw new ValidationError(field, `missing; expected ${what}`);
  if (!isRecord(value)) throw new ValidationError(field, `expected ${what}, got ${describeValue(value)}`);
  return value;
}

/** Refuses keys outside `allowed`, because a misspelt optional field would otherwise fall back to its default silently. */
export function rejectUnknownKeys(value: Record<string, unknown>, allowed: readonly string[], path: string): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw new ValidationError(`${path}.${key}`, `unknown field; expected one of ${allowed.join(', ')}`);
    }
  }
}

export function requireNonEmptyString(value: unknown, field: string): string {
  if (value === undefined || value === null) throw new ValidationError(field, 'missing; expected a non-empty string');
  if (typeof value !== 'string' || value.length === 0) {
    throw new ValidationError(field, `expected a non-empty string, got ${describeValue(value)}`);
  }
  return value;
}

export function requireFiniteNumber(value: unknown, field: string): number {
  if (value === undefined || value === null) throw new ValidationError(field, 'missing; expected a finite number');
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new ValidationError(field, `expected a finite number, got ${describeValue(value)}`);
  }
  return value;
}

export function requireBoolean(value: unknown, field: string): boolean {
  if (typeof value !== 'boolean') throw new ValidationError(field, `expected true or false, got ${describeValue(value)}`);
  return value;
}

export function requireArray(value: unknown, field: string, what: string): unknown[] {
  if (value === undefined || value === null) throw new ValidationError(field, `missing; expected ${what}`);
  if (!Array.isArray(value)) throw new ValidationError(field, `expected ${what}, got ${describeValue(value)}`);
  return value;
}

/**
 * A per-token log-probability row: finite numbers, each <= 0 (a log-probability
 * above 0 means the caller sent logits or probabilities by mistake).
 */
export function requireLogProbRow(value: unknown, field: string): number[] {
  const row = requireArray(value, field, 'an array of log-probabilities');
  row.forEach((v, u) => {
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      throw new ValidationError(`${field}[${u}]`, `expected a finite number, got ${describeValue(v)}`);
    }
    if (v > 0) throw new ValidationError(`${field}[${u}]`, `a log-probability must be <= 0, got ${v}`);
  });
  return row as number[];
}

/** A token mask row: every entry exactly 0 or 1, and at least one 1. */
export function requireMaskRow(value: unknown, field: string): number[] {
  const row = requireArray(value, field, 'an array of 0/1 mask values');
  row.forEach((v, u) => {
    if (v !== 0 && v !== 1) throw new ValidationError(`${field}[${u}]`, `expected 0 or 1, got ${describeValue(v)}`);
  });
  if (!row.includes(1)) {
    // A member without response tokens has no log-ratio; counting it would change K silently.
    throw new ValidationError(field, 'no unmasked token (every entry is 0); each member needs at least one response token');
  }
  return row as number[];
}

export function requireSameLength(row: readonly unknown[], field: string, reference: readonly unknown[], referenceName: string): void {
  if (row.length !== reference.length) {
    throw new ValidationError(field, `length ${row.length} differs from ${referenceName} length ${reference.length}`);
  }
}
