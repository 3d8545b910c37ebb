import { formatLine, LineSplitter } from './log-view';

describe('srpo up: the log view', () => {
  const json = JSON.stringify({
    ts: '2026-12-05T19:20:01.123Z',
    level: 'warn',
    component: 'update-cycle',
    msg: 'update applied',
    version: 3,
    note: 'two words',
    ok: true,
    k: { a: 1 },
  });

  it('shows a structured line as time, level, component, message and every field, prefixed by the role', () => {
    expect(formatLine('learner', json, false)).toBe('learner      19:20:01 warn  update-cycle update applied version=3 note="two words" ok=true k={"a":1}');
  });

  it('passes other lines through, prefixed', () => {
    expect(formatLine('serve', 'Error: boom', false)).toBe('serve        Error: boom');
    expect(formatLine('gateway', '{not json', false)).toBe('gateway      {not json');
    expect(formatLine('gateway', '[1,2]', false)).toBe('gateway      [1,2]');
  });

  it('colours the role and the level only when asked (a TTY)', () => {
    const coloured = formatLine('materializer', json, true);
    expect(coloured.startsWith('\x1b[35mmaterializer\x1b[0m ')).toBe(true);
    expect(coloured).toContain('\x1b[33mwarn \x1b[0m');
    expect(formatLine('materializer', json, false)).not.toContain('\x1b[');
  });

  it('splits chunks into lines, holding a partial line until it ends', () => {
    const s = new LineSplitter();
    expect(s.push('a\r\nb')).toEqual(['a']);
    expect(s.push('c\nd\n')).toEqual(['bc', 'd']);
    expect(s.push('tail')).toEqual([]);
    expect(s.flush()).toEqual(['tail']);
    expect(s.flush()).toEqual([]);
  });
});
