/**
 * `srpo up`'s one log view: every line of every child, prefixed by its role. The apps log one
 * JSON object a line (libs/core's Logger); such a line is shown as
 * `learner      12:03:04 info  update-cycle  update applied  version=3 loss=0.12`, the fields
 * kept in full (values JSON-encoded where they are not plain), so nothing is lost and the
 * terminal stays readable. Other lines (a crash's stack trace) pass through as they are.
 */
export type Role = 'materializer' | 'learner' | 'serve' | 'gateway';

const ROLE_COLOUR: Record<Role, number> = { materializer: 35, learner: 36, serve: 32, gateway: 34 };
const LEVEL_COLOUR: Record<string, number> = { debug: 90, info: 0, warn: 33, error: 31 };
const WIDTH = 'materializer'.length;

const paint = (on: boolean, code: number, text: string): string => (on && code !== 0 ? `\x1b[${code}m${text}\x1b[0m` : text);

/** A field's value as shown: plain strings and numbers bare, anything else as JSON. */
function showValue(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  return JSON.stringify(v);
}

/** One child's line for the terminal; `colour` when stdout is a TTY. */
export function formatLine(role: Role, line: string, colour: boolean): string {
  const prefix = paint(colour, ROLE_COLOUR[role], role.padEnd(WIDTH));
  let entry: unknown;
  if (line.startsWith('{')) {
    try {
      entry = JSON.parse(line);
    } catch {
      entry = undefined;
    }
  }
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) return `${prefix} ${line}`;
  const { ts, level, component, msg, ...fields } = entry as Record<string, unknown>;
  const time = typeof ts === 'string' && /T(\d\d:\d\d:\d\d)/.test(ts) ? /T(\d\d:\d\d:\d\d)/.exec(ts)![1] : '';
  const lvl = typeof level === 'string' ? level : 'info';
  const parts = [
    time,
    paint(colour, LEVEL_COLOUR[lvl] ?? 0, lvl.padEnd(5)),
    typeof component === 'string' ? component : '',
    typeof msg === 'string' ? msg : '',
    ...Object.entries(fields).map(([k, v]) => `${k}=${showValue(v)}`),
  ].filter((p) => p !== '');
  return `${prefix} ${parts.join(' ')}`;
}

/** Splits a stream's chunks into lines, keeping a partial line until its end arrives. */
export class LineSplitter {
  private rest = '';

  push(chunk: string): string[] {
    const text = this.rest + chunk;
    const lines = text.split('\n');
    this.rest = lines.pop() ?? '';
    return lines.map((l) => l.replace(/\r$/, ''));
  }

  /** What is left once the stream ended. */
  flush(): string[] {
    const rest = this.rest;
    this.rest = '';
    return rest === '' ? [] : [rest];
  }
}
