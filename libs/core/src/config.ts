import { ConfigError, errorMessage } from './errors';

/**
 * Reads and validates configuration variables from an environment map.
 *
 * Each app has one config module that builds an `EnvReader` over `process.env`
 * at boot; nothing else reads the environment. Every accessor names the
 * variable in its error, so a bad deployment fails fast with a message such as
 * `invalid configuration SRPO_CLIP_LOW: expected a number, got "abc"`.
 */
export class EnvReader {
  constructor(private readonly env: Readonly<Record<string, string | undefined>>) {}

  has(name: string): boolean {
    const v = this.env[name];
    return v !== undefined && v !== '';
  }

  str(name: string, fallback?: string): string {
    const v = this.env[name];
    if (v === undefined || v === '') {
      if (fallback !== undefined) return fallback;
      throw new ConfigError(name, 'is required but not set');
    }
    return v;
  }

  optionalStr(name: string): string | undefined {
    const v = this.env[name];
    return v === undefined || v === '' ? undefined : v;
  }

  int(name: string, fallback?: number, range: { min?: number; max?: number } = {}): number {
    const raw = this.optionalStr(name);
    if (raw === undefined) {
      if (fallback !== undefined) return fallback;
      throw new ConfigError(name, 'is required but not set');
    }
    if (!/^-?\d+$/.test(raw.trim())) throw new ConfigError(name, `expected an integer, got "${raw}"`);
    return checkRange(name, Number.parseInt(raw, 10), range);
  }

  num(name: string, fallback?: number, range: { min?: number; max?: number } = {}): number {
    const raw = this.optionalStr(name);
    if (raw === undefined) {
      if (fallback !== undefined) return fallback;
      throw new ConfigError(name, 'is required but not set');
    }
    const n = Number(raw);
    if (!Number.isFinite(n)) throw new ConfigError(name, `expected a number, got "${raw}"`);
    return checkRange(name, n, range);
  }

  bool(name: string, fallback: boolean): boolean {
    const raw = this.optionalStr(name);
    if (raw === undefined) return fallback;
    const v = raw.trim().toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(v)) return true;
    if (['0', 'false', 'no', 'off'].includes(v)) return false;
    throw new ConfigError(name, `expected true or false, got "${raw}"`);
  }

  oneOf<T extends string>(name: string, allowed: readonly T[], fallback?: T): T {
    const raw = this.optionalStr(name);
    if (raw === undefined) {
      if (fallback !== undefined) return fallback;
      throw new ConfigError(name, `is required; one of ${allowed.join(', ')}`);
    }
    if (!(allowed as readonly string[]).includes(raw)) {
      throw new ConfigError(name, `expected one of ${allowed.join(', ')}, got "${raw}"`);
    }
    return raw as T;
  }

  /** The variable parsed as JSON, or undefined when it is not set; invalid JSON is an error naming it. */
  json(name: string): unknown {
    const raw = this.optionalStr(name);
    if (raw === undefined) return undefined;
    try {
      return JSON.parse(raw) as unknown;
    } catch (e) {
      throw new ConfigError(name, `is not valid JSON (${errorMessage(e)})`);
    }
  }

  list(name: string, fallback: string[] = []): string[] {
    const raw = this.optionalStr(name);
    if (raw === undefined) return fallback;
    return raw
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s.length > 0);
  }
}

function checkRange(name: string, n: number, range: { min?: number; max?: number }): number {
  if (range.min !== undefined && n < range.min) throw new ConfigError(name, `must be >= ${range.min}, got ${n}`);
  if (range.max !== undefined && n > range.max) throw new ConfigError(name, `must be <= ${range.max}, got ${n}`);
  return n;
}
