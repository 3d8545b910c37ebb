import { Template } from '@huggingface/jinja';
import { runBounded } from './bounded-run';

class Exceeded extends Error {}
const exceeded = () => new Exceeded('over the bound');

/** Backtracks exponentially on a run of 'a's that does not end the string: hours at 40 characters. */
const BACKTRACKING = /^(a+)+$/u;

describe('runBounded', () => {
  it("returns the call's value, and lets the call's own error out unchanged", () => {
    expect(runBounded(() => 6 * 7, 1_000, exceeded)).toBe(42);
    const own = new RangeError('its own');
    expect(() =>
      runBounded(
        () => {
          throw own;
        },
        1_000,
        exceeded,
      ),
    ).toThrow(own);
  });

  it('stops a backtracking regex at the bound, and the thread goes on', () => {
    const t0 = performance.now();
    expect(() => runBounded(() => BACKTRACKING.test('a'.repeat(40) + 'b'), 200, exceeded)).toThrow(Exceeded);
    // Stopped near 200 ms, not after the regex's hours.
    expect(performance.now() - t0).toBeLessThan(3_000);
    expect(BACKTRACKING.test('aaa')).toBe(true);
    expect(runBounded(() => 'after', 1_000, exceeded)).toBe('after');
  });

  it('stops a Jinja loop of about 10^8 steps at the bound', () => {
    const loop = new Template('{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}done');
    expect(() => runBounded(() => loop.render({}), 200, exceeded)).toThrow(Exceeded);
    expect(new Template('{{ 1 + 1 }}').render({})).toBe('2');
  });

  it('a run inside a run is covered by the outer bound', () => {
    expect(runBounded(() => runBounded(() => 'inner', 1_000, exceeded) + ' and outer', 1_000, exceeded)).toBe('inner and outer');
    expect(() =>
      runBounded(
        () => runBounded(() => BACKTRACKING.test('a'.repeat(40) + 'b'), 60_000, exceeded),
        200,
        () => new Exceeded('outer'),
      ),
    ).toThrow('outer');
  });
});
