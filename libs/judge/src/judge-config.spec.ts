import * as path from 'path';
import { EnvReader } from '@srpo/core';
import { readJudgeConfig } from './judge-config';

const read = (env: Record<string, string>) => readJudgeConfig(new EnvReader(env), '/work', 'srpo.');
const JUDGE = {
  SRPO_JUDGE_POLICIES: 'actor',
  SRPO_JUDGE_TOKENIZER_DIR: 'tok',
  SRPO_JUDGE_BASE_URL: 'http://j:8000/v1/',
  SRPO_JUDGE_MODEL: 'm',
  SRPO_JUDGE_RUBRIC: 'r.txt',
};

describe('readJudgeConfig', () => {
  it('reads an LLM judge with its defaults', () => {
    const c = read({ ...JUDGE, JUDGE_KEY: 'sk-1', SRPO_JUDGE_API_KEY_ENV: 'JUDGE_KEY', SRPO_JUDGE_SCORE_RANGE: '1..5' });
    expect(c).toMatchObject({
      mode: 'output',
      policies: ['actor'],
      groupId: 'srpo.judge',
      start: 'latest',
      successThreshold: 3,
      rewardSource: 'judge',
      timeoutMs: 30_000,
      concurrency: 4,
    });
    expect(c.source).toEqual({
      kind: 'judge',
      baseUrl: 'http://j:8000/v1',
      model: 'm',
      apiKey: 'sk-1',
      rubricFile: path.resolve('/work', 'r.txt'),
      range: { min: 1, max: 5 },
      maxTokens: 256,
      temperature: 0,
    });
    expect(c.tokenizerDir).toBe(path.resolve('/work', 'tok'));
  });

  it.each([
    [{ SRPO_JUDGE_POLICIES: '' }, /SRPO_JUDGE_POLICIES: is required/],
    [{ SRPO_JUDGE_REWARD_URL: 'http://r/' }, /exactly one reward source.*got 2/],
    [{ SRPO_JUDGE_BASE_URL: 'ftp://x' }, /SRPO_JUDGE_BASE_URL: expected an http\(s\) URL/],
    [{ SRPO_JUDGE_BASE_URL: 'http://u:p@x/v1' }, /SRPO_JUDGE_BASE_URL: credentials in the URL/],
    [{ SRPO_JUDGE_API_KEY_ENV: 'UNSET_KEY_VAR' }, /SRPO_JUDGE_API_KEY_ENV: names UNSET_KEY_VAR, which is not set/],
    [{ SRPO_JUDGE_SCORE_RANGE: '10..0' }, /SRPO_JUDGE_SCORE_RANGE: MIN must be below MAX/],
    [{ SRPO_JUDGE_MODE: 'batch' }, /SRPO_JUDGE_MODE: expected one of output, episode/],
    [{ SRPO_JUDGE_CONCURRENCY: '0' }, /SRPO_JUDGE_CONCURRENCY: must be >= 1/],
    [{ SRPO_JUDGE_REWARD_SOURCE: 'llm judge' }, /SRPO_JUDGE_REWARD_SOURCE: must be 1-64 letters/],
  ])('refuses %j naming the variable', (patch, message) => {
    expect(() => read({ ...JUDGE, ...patch })).toThrow(message);
  });

  it('takes a reward module or endpoint instead of a judge, with threshold 0.5', () => {
    const m = read({ SRPO_JUDGE_POLICIES: 'a,b', SRPO_JUDGE_TOKENIZER_DIR: 't', SRPO_JUDGE_REWARD_MODULE: 'reward.js' });
    expect(m.source).toEqual({ kind: 'module', file: path.resolve('/work', 'reward.js') });
    expect(m.policies).toEqual(['a', 'b']);
    expect(m.successThreshold).toBe(0.5);
    expect(m.rewardSource).toBe('program');
    expect(read({ SRPO_JUDGE_POLICIES: 'a', SRPO_JUDGE_TOKENIZER_DIR: 't', SRPO_JUDGE_REWARD_URL: 'https://v.example/score' }).source).toEqual({
      kind: 'http',
      url: 'https://v.example/score',
      apiKey: undefined,
    });
  });
});
