import type { ValueTransformer } from 'typeorm';
import { ErrorCode, SrpoError } from '@srpo/core';

/** Any value that survives a JSON round trip. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

const NON_FINITE: Record<string, number> = { NaN: Number.NaN, Infinity: Number.POSITIVE_INFINITY, '-Infinity': Number.NEGATIVE_INFINITY };

/**
 * JSON text that keeps NaN and ±Infinity. Diagnostics may legitimately hold them
 * (a ratio statistic over zero units), and plain JSON would turn them into null,
 * which would make the audit record lie about what the learner computed.
 */
export function encodeJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (typeof v === 'number' && !Number.isFinite(v)) return { $number: String(v) };
    return v;
  });
}

export function decodeJson<T>(text: string): T {
  return JSON.parse(text, (_k, v: unknown) => {
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
      const keys = Object.keys(v);
      if (keys.length === 1 && keys[0] === '$number') {
        const n = NON_FINITE[(v as { $number: string }).$number];
        if (n !== undefined) return n;
      }
    }
    return v;
  }) as T;
}

/** A text column holding JSON; the entity property is the decoded value. */
export const jsonColumn: ValueTransformer = {
  to: (value: unknown) => (value === undefined ? undefined : value === null ? null : encodeJson(value)),
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- a text column: the drivers return a string
  from: (value: unknown) => (value === null || value === undefined ? value : decodeJson<unknown>(String(value))),
};

/**
 * bigint columns come back as strings from pg (int8 can exceed 2^53) and as
 * numbers from better-sqlite3. Everything stored here (offsets, epoch ms, seeds)
 * fits a safe integer; anything else is refused rather than silently rounded.
 */
export const bigintColumn: ValueTransformer = {
  to: (value: unknown) => value,
  from: (value: unknown) => {
    if (value === null || value === undefined) return value;
    const n = typeof value === 'number' ? value : Number(value);
    if (!Number.isSafeInteger(n)) {
      // eslint-disable-next-line @typescript-eslint/no-base-to-string -- pg returns int8 as a string, better-sqlite3 as a number
      throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `bigint column value ${String(value)} is not a safe integer`);
    }
    return n;
  },
};
