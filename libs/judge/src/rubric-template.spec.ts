import { createHash } from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ConfigError } from '@srpo/core';
import { RubricTemplate } from './rubric-template';

const VALUES = { prompt: 'What is 2+3?', response: '5', transcript: 't', policy: 'actor', task: 'add', episode: 'e1' };

describe('RubricTemplate', () => {
  let dir: string;
  beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-rubric-'))));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("hashes the file's bytes and records its name", () => {
    const file = path.join(dir, 'math.txt');
    const text = 'Task {{task}}.\nQ: {{prompt}}\nA: {{ response }}\nAnswer {"score": 0-10}.\n';
    fs.writeFileSync(file, text);
    const rubric = RubricTemplate.fromFile(file);
    expect(rubric.name).toBe('math.txt');
    expect(rubric.sha256).toBe(createHash('sha256').update(fs.readFileSync(file)).digest('hex'));
    expect(rubric.render(VALUES)).toBe('Task add.\nQ: What is 2+3?\nA: 5\nAnswer {"score": 0-10}.\n');
  });

  it('replaces in one pass: a response holding a placeholder stays as written', () => {
    const rubric = RubricTemplate.fromText('r', '{{prompt}} | {{response}}');
    expect(rubric.render({ ...VALUES, response: 'see {{prompt}}' })).toBe('What is 2+3? | see {{prompt}}');
  });

  it('refuses an unknown placeholder, naming it and the variable', () => {
    expect(() => RubricTemplate.fromText('bad.txt', '{{question}} {{response}}')).toThrow(ConfigError);
    expect(() => RubricTemplate.fromText('bad.txt', '{{question}} {{response}}')).toThrow(/SRPO_JUDGE_RUBRIC.*\{\{question\}\}/);
  });

  it('refuses a rubric that never shows the response', () => {
    expect(() => RubricTemplate.fromText('r', 'Rate {{prompt}}')).toThrow(/neither \{\{response\}\} nor \{\{transcript\}\}/);
  });

  it('refuses a missing or oversized file', () => {
    expect(() => RubricTemplate.fromFile(path.join(dir, 'none.txt'))).toThrow(/SRPO_JUDGE_RUBRIC: cannot read/);
    const big = path.join(dir, 'big.txt');
    fs.writeFileSync(big, `{{response}}${'x'.repeat(70_000)}`);
    expect(() => RubricTemplate.fromFile(big)).toThrow(/the limit is 65536/);
  });
});
