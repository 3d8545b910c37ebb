import { BadRequestException } from '@nestjs/common';

const ISO = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** A time query parameter: epoch milliseconds (digits) or ISO 8601; undefined when absent. */
export function parseTimeParam(name: string, raw: unknown): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string') throw new BadRequestException(`${name}: give it once, as epoch milliseconds or an ISO 8601 time`);
  if (/^\d+$/.test(raw)) {
    const n = Number(raw);
    if (!Number.isSafeInteger(n)) throw new BadRequestException(`${name}: ${raw} is out of range`);
    return n;
  }
  const ms = ISO.test(raw) ? Date.parse(raw) : Number.NaN;
  if (!Number.isFinite(ms) || ms < 0) throw new BadRequestException(`${name}: expected epoch milliseconds or an ISO 8601 time, got "${raw}"`);
  return ms;
}

export function parseLimitParam(raw: unknown, fallback: number, max: number): number {
  if (raw === undefined || raw === '') return fallback;
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- echoes what the query held, whatever its type
  if (typeof raw !== 'string' || !/^\d+$/.test(raw)) throw new BadRequestException(`limit: expected an integer in [1, ${max}], got "${String(raw)}"`);
  const n = Number(raw);
  if (n < 1 || n > max) throw new BadRequestException(`limit: expected an integer in [1, ${max}], got ${n}`);
  return n;
}

export function parseStringParam(name: string, raw: unknown): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string') throw new BadRequestException(`${name}: give it once`);
  return raw;
}
