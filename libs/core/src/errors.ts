/**
 * Typed errors shared by every app and lib.
 *
 * Each error carries a stable {@link ErrorCode} (what went wrong, suitable for a
 * dead-letter reason or a metric label) and a `retriable` flag (whether trying the
 * same operation again may succeed). The consumer runner retries retriable errors
 * with backoff and dead-letters the rest; controllers map them to HTTP statuses.
 */
export enum ErrorCode {
  /** Configuration is missing or malformed. Fatal at boot. */
  CONFIG_INVALID = 'CONFIG_INVALID',
  /** An event failed validation before it was sent (SDK) or after it was decoded. */
  VALIDATION_FAILED = 'VALIDATION_FAILED',
  /** Bytes could not be decoded as any known event. */
  DECODE_FAILED = 'DECODE_FAILED',
  /** The bytes carry a schema fingerprint this process does not know. */
  UNKNOWN_SCHEMA = 'UNKNOWN_SCHEMA',
  /** The payload exceeds the configured size limit. */
  PAYLOAD_TOO_LARGE = 'PAYLOAD_TOO_LARGE',
  /** Events contradict each other (a transition listing another episode's output, ...). */
  INVARIANT_VIOLATED = 'INVARIANT_VIOLATED',
  /** The broker or database is unreachable or timed out. */
  UNAVAILABLE = 'UNAVAILABLE',
  /** A transactional producer was fenced by a newer instance. */
  FENCED = 'FENCED',
  /** A checkpoint or record failed its integrity check. */
  INTEGRITY_FAILED = 'INTEGRITY_FAILED',
  /** A requested entity does not exist. */
  NOT_FOUND = 'NOT_FOUND',
  /** An operation is not allowed in the current state. */
  CONFLICT = 'CONFLICT',
  /** Wrong or missing credentials. */
  UNAUTHORIZED = 'UNAUTHORIZED',
  /** A process dependency (broker, native library) could not be started or loaded. */
  ENVIRONMENT = 'ENVIRONMENT',
}

export interface SrpoErrorOptions {
  retriable?: boolean;
  /** The offending field, as a dotted path (`members[2].logpOld`). */
  field?: string;
  cause?: unknown;
  details?: Record<string, unknown>;
}

export class SrpoError extends Error {
  readonly code: ErrorCode;
  readonly retriable: boolean;
  readonly field?: string;
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options: SrpoErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retriable = options.retriable ?? false;
    this.field = options.field;
    this.details = options.details;
  }
}

/** A field-level validation failure; the message always starts with the field path. */
export class ValidationError extends SrpoError {
  constructor(field: string, problem: string, details?: Record<string, unknown>) {
    super(ErrorCode.VALIDATION_FAILED, `${field}: ${problem}`, { field, details });
  }
}

export class ConfigError extends SrpoError {
  constructor(variable: string, problem: string) {
    super(ErrorCode.CONFIG_INVALID, `invalid configuration ${variable}: ${problem}`, { field: variable });
  }

  /** Runs a check of `variable`'s value; any failure but a ConfigError becomes one naming the variable. */
  static guard<T>(variable: string, check: () => T): T {
    try {
      return check();
    } catch (e) {
      if (e instanceof ConfigError) throw e;
      throw new ConfigError(variable, errorMessage(e));
    }
  }
}

export function isRetriable(error: unknown): boolean {
  if (error instanceof SrpoError) return error.retriable;
  // kafkajs marks its own transient errors.
  if (typeof error === 'object' && error !== null && 'retriable' in error) {
    return Boolean(error.retriable);
  }
  return false;
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
