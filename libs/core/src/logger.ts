/**
 * Structured JSON logs, one object per line on stderr.
 *
 * Fields that apply travel with the entry (`topic`, `partition`, `offset`,
 * `updateId`, ...). Secrets never reach a log: values under keys that look like
 * credentials are replaced before writing.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const LEVEL_ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const SECRET_KEY = /pass(word)?|secret|token|credential|sasl|authorization|api[-_]?key/i;

export type LogFields = Record<string, unknown>;

export interface LogSink {
  write(line: string): void;
}

const stderrSink: LogSink = { write: (line) => process.stderr.write(line + '\n') };

export function redact(value: unknown, depth = 0): unknown {
  if (depth > 6 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    out[k] = SECRET_KEY.test(k) ? '[redacted]' : redact(v, depth + 1);
  }
  return out;
}

export class Logger {
  private static sink: LogSink = stderrSink;
  private static minLevel: LogLevel = 'info';

  constructor(
    private readonly component: string,
    private readonly base: LogFields = {},
  ) {}

  /** Process-wide settings; called once by each app's config module. */
  static configure(options: { level?: LogLevel; sink?: LogSink }): void {
    if (options.level) Logger.minLevel = options.level;
    if (options.sink) Logger.sink = options.sink;
  }

  child(fields: LogFields): Logger {
    return new Logger(this.component, { ...this.base, ...fields });
  }

  debug(msg: string, fields?: LogFields): void {
    this.log('debug', msg, fields);
  }
  info(msg: string, fields?: LogFields): void {
    this.log('info', msg, fields);
  }
  warn(msg: string, fields?: LogFields): void {
    this.log('warn', msg, fields);
  }
  error(msg: string, fields?: LogFields): void {
    this.log('error', msg, fields);
  }

  private log(level: LogLevel, msg: string, fields?: LogFields): void {
    if (LEVEL_ORDER[level] < LEVEL_ORDER[Logger.minLevel]) return;
    const entry = {
      ts: new Date().toISOString(),
      level,
      component: this.component,
      msg,
      ...(redact({ ...this.base, ...fields }) as LogFields),
    };
    Logger.sink.write(JSON.stringify(entry, bigintSafe));
  }
}

function bigintSafe(_key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Error) return { name: value.name, message: value.message };
  return value;
}
