import { parseScore, parseScoreRange } from './score-parser';

const RANGE = { min: 0, max: 10 };

describe('parseScore', () => {
  it.each([
    ['{"score": 7}', 7],
    ['Reasoning first.\n```json\n{"score": 2.5, "why": "short"}\n```', 2.5],
    ['{"score": "10"}', 10],
    ['The answer is right.\nScore: 8', 8],
    ['**Score:** 6/10', 6],
    ['score = 0', 0],
    ['{"score": 9}\nScore: 9', 9],
  ])('reads %j as %d and maps it onto [0, 1]', (answer, raw) => {
    expect(parseScore(answer, RANGE)).toEqual({ ok: true, rawScore: raw, reward: raw / 10 });
  });

  it('maps a shifted range linearly', () => {
    expect(parseScore('Score: 3', { min: 1, max: 5 })).toEqual({ ok: true, rawScore: 3, reward: 0.5 });
  });

  it.each([
    ['I think it is good.', /no \{"score": x\}/],
    ['{"score": 11}', /outside 0\.\.10/],
    ['Score: -1', /outside/],
    ['{"score": 3}\nScore: 4', /conflicting scores 3, 4/],
    ['{"score": "high"}', /no \{"score"/],
    ['{"score": null}', /no \{"score"/],
    ['The score: seven', /no \{"score"/],
    ['Score: 5 because the proof in step 3 is fine', /no \{"score"/],
  ])('calls %j garbage', (answer, problem) => {
    const parsed = parseScore(answer, RANGE);
    expect(parsed.ok).toBe(false);
    expect(parsed.ok ? '' : parsed.problem).toMatch(problem);
  });

  it('does not read an answer past its bound', () => {
    const parsed = parseScore(`Score: 5\n${'x'.repeat(20_000)}`, RANGE);
    expect(parsed).toEqual({ ok: false, problem: expect.stringMatching(/the limit is 16384/) as unknown });
  });
});

describe('parseScoreRange', () => {
  it('reads MIN..MAX', () => {
    expect(parseScoreRange('0..10')).toEqual({ min: 0, max: 10 });
    expect(parseScoreRange(' -1 .. 1.5 ')).toEqual({ min: -1, max: 1.5 });
  });

  it.each(['10..0', '5..5', '0-10', 'a..b', ''])('refuses %j', (text) => {
    expect(() => parseScoreRange(text)).toThrow(/MIN/);
  });
});
