import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ValidationError } from '@srpo/core';
import { answerMatches, JsonlHeldOutEvaluator, normaliseAnswer, readHeldOutFile } from './held-out-evaluator';

describe('held-out scoring', () => {
  it.each([
    ['So 3 + 4 = 7.', '7', true],
    ['7 apples, then 2 more: 9', '7', false],
    ['The total is 1200.', '1,200', true],
    ['It costs 1,200 dollars', '1200', true],
    ['-3.5', '-3.5', true],
    ['3.50', '3.5', true],
    ['no number here', '4', false],
    ['  Paris. ', 'paris', true],
    ['"Paris!"', 'Paris', true],
    ['Paris is the capital', 'Paris', false],
    ['New\n  York', 'new york', true],
  ])('%j solves answer %j: %s', (reply, answer, expected) => {
    expect(answerMatches(reply, answer)).toBe(expected);
  });

  it('normalises with NFKC and case', () => {
    expect(normaliseAnswer('ＡＢＣ ')).toBe('abc');
  });

  it('reads the first maxItems items, failing with the line', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'held-out-'));
    const file = path.join(dir, 'h.jsonl');
    const item = (a: unknown) => JSON.stringify({ messages: [{ role: 'user', content: 'q' }], answer: a });
    fs.writeFileSync(file, [item('1'), '', item(2), item('3')].join('\n'));
    expect(readHeldOutFile(file, 2).map((i) => i.answer)).toEqual(['1', '2']);
    fs.writeFileSync(file, [item('1'), JSON.stringify({ messages: [], answer: '1' })].join('\n'));
    expect(() => readHeldOutFile(file, 10)).toThrow(`${file}:2 messages`);
    fs.writeFileSync(file, [item('1'), item(null)].join('\n'));
    expect(() => readHeldOutFile(file, 10)).toThrow(`${file}:2 answer`);
    fs.writeFileSync(file, '\n');
    expect(() => readHeldOutFile(file, 10)).toThrow(ValidationError);
    expect(() => new JsonlHeldOutEvaluator(file, { maxItems: 0, maxTokens: 8, seed: 0, concurrency: 1 })).toThrow('maxItems');
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
