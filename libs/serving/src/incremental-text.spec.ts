import { IncrementalText } from './incremental-text';

/** A toy decoder: each id is one character, except 9 and 8, the two UTF-8 halves of "é" (U+FFFD while alone). */
const decode = (ids: readonly number[]): string => {
  let s = '';
  for (let i = 0; i < ids.length; i++) {
    if (ids[i] === 9 && ids[i + 1] === 8) {
      s += 'é';
      i++;
    } else if (ids[i] === 9 || ids[i] === 8) s += '\uFFFD';
    else s += 'abcdefgh'[ids[i]];
  }
  return s;
};

describe('incremental text', () => {
  it('hands out final text only: an incomplete character waits for its second half', () => {
    const t = new IncrementalText(decode, []);
    expect(t.push(0).delta).toBe('a');
    expect(t.push(9).delta).toBe('');
    expect(t.push(8).delta).toBe('é');
    expect(t.finish()).toBe('');
    expect(t.text).toBe('aé');
  });

  it('cuts before a stop string, holding back what could still become one', () => {
    const t = new IncrementalText(decode, ['cd']);
    expect(t.push(0)).toEqual({ delta: 'a', stopped: false });
    expect(t.push(2)).toEqual({ delta: '', stopped: false }); // "c" may start "cd"
    expect(t.push(3)).toEqual({ delta: '', stopped: true });
    expect(t.text).toBe('a');
    expect(t.push(0)).toEqual({ delta: '', stopped: true });
  });

  it('releases held text once it can no longer be a stop, and flushes it at the end', () => {
    const t = new IncrementalText(decode, ['cd', 'ccx']);
    t.push(2);
    expect(t.push(1).delta).toBe('cb');
    t.push(2);
    t.push(2);
    expect(t.text).toBe('cb');
    expect(t.finish()).toBe('cc');
    expect(t.text).toBe('cbcc');
  });

  it("finds the earliest of several stops, even one inside a single token's text", () => {
    const wide = (ids: readonly number[]) => ids.map((i) => ['xy', 'zw', 'q'][i]).join('');
    const t = new IncrementalText(wide, ['w', 'yz']);
    t.push(0);
    expect(t.push(1)).toEqual({ delta: '', stopped: true });
    expect(t.text).toBe('x');
  });

  it('holds everything from holdFrom on (and what could still begin it); whole() has it all, finish() releases it', () => {
    const t = new IncrementalText(decode, [], 'cd');
    expect(t.push(0).delta).toBe('a');
    expect(t.push(2).delta).toBe(''); // "c" may begin "cd"
    expect(t.push(1).delta).toBe('cb'); // it did not
    expect(t.push(2).delta).toBe('');
    expect(t.push(3).delta).toBe(''); // "cd": held from here on
    expect(t.push(0).delta).toBe('');
    expect([t.text, t.whole()]).toEqual(['acb', 'acbcda']);
    expect(t.finish()).toBe('cda');
    expect(t.text).toBe('acbcda');
  });

  it('whole() stops where a stop string cut the choice', () => {
    const t = new IncrementalText(decode, ['bc'], 'e');
    for (const id of [0, 1, 2, 3]) t.push(id);
    expect([t.stopped, t.whole(), t.text]).toEqual([true, 'a', 'a']);
  });
});
