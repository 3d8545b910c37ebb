import * as fs from 'fs';
import * as path from 'path';
import { Command } from 'commander';
import { EnvReader, repoRoot } from '@srpo/core';
import { readJudgeConfig } from '@srpo/judge';
import { flagsToEnv } from './app-flags';
import { JUDGE_FLAGS, judgeCommand, judgeOpensSealed } from './judge.command';
import type { CliConfig } from '../cli-config';

/** Runs `srpo judge args` up to where its configuration is read; rejects with that error. */
async function run(args: string[], env: Record<string, string> = {}): Promise<void> {
  const config = () => ({ topics: { prefix: 'srpo.' } }) as unknown as CliConfig;
  const program = new Command('srpo').exitOverride().configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
  program.addCommand(
    judgeCommand(config, env)
      .exitOverride()
      .configureOutput({ writeErr: () => undefined, writeOut: () => undefined }),
  );
  await program.parseAsync(['judge', ...args], { from: 'user' });
}

describe('srpo judge flags', () => {
  const source = fs.readFileSync(path.join(repoRoot(), 'libs', 'judge', 'src', 'judge-config.ts'), 'utf8');

  it("set only variables the judge's config module reads", () => {
    for (const spec of JUDGE_FLAGS)
      expect(source.includes(`'${spec.variable}'`) ? spec.variable : `${spec.flag}: ${spec.variable} is never read`).toBe(spec.variable);
  });

  it('document the defaults the config module applies', () => {
    const c = readJudgeConfig(new EnvReader({ SRPO_JUDGE_POLICIES: 'a', SRPO_JUDGE_TOKENIZER_DIR: 't', SRPO_JUDGE_REWARD_URL: 'http://r/' }), '/', 'srpo.');
    const numeric: Record<string, number> = {
      SRPO_JUDGE_TIMEOUT_MS: c.timeoutMs,
      SRPO_JUDGE_CONCURRENCY: c.concurrency,
      SRPO_JUDGE_MAX_PENDING_EPISODES: c.maxPendingEpisodes,
      SRPO_JUDGE_MAX_TEXT_CHARS: c.maxTextChars,
      SRPO_JUDGE_PENDING_TTL_MS: c.pendingTtlMs,
    };
    for (const [variable, value] of Object.entries(numeric)) expect(JUDGE_FLAGS.find((f) => f.variable === variable)?.default).toBe(String(value));
    expect(JUDGE_FLAGS.find((f) => f.variable === 'SRPO_JUDGE_MODE')?.default).toBe(c.mode);
    expect(JUDGE_FLAGS.find((f) => f.variable === 'SRPO_JUDGE_START')?.default).toBe(c.start);
  });

  it("open sealed outputs only when the learner's store is named, never on the default SQLite path", () => {
    expect(judgeOpensSealed({})).toBe(false);
    expect(judgeOpensSealed({ SRPO_SQLITE_PATH: '' })).toBe(false);
    expect(judgeOpensSealed({ SRPO_SQLITE_PATH: '/tmp/learner.sqlite' })).toBe(true);
    expect(judgeOpensSealed({ SRPO_DATABASE_URL: 'postgres://u@h/db' })).toBe(true);
  });

  it('map flags to variables, paths made absolute', () => {
    const cmd = judgeCommand(() => ({}) as CliConfig).exitOverride();
    cmd.parseOptions(['--rubric', 'r.txt', '--timeout-ms', '500', '--mode', 'episode']);
    expect(flagsToEnv(JUDGE_FLAGS, cmd.opts(), '/work')).toEqual({
      SRPO_JUDGE_RUBRIC: '/work/r.txt',
      SRPO_JUDGE_TIMEOUT_MS: '500',
      SRPO_JUDGE_MODE: 'episode',
    });
  });

  it('refuse a bad flag naming its variable, and a missing setting before anything starts', async () => {
    await expect(run(['--policy', 'a', '--concurrency', '0'])).rejects.toThrow(/must be in \[1, 256\] \(sets SRPO_JUDGE_CONCURRENCY\)/);
    await expect(run(['--policy', 'a', '--reward-url', 'http://r/'])).rejects.toThrow(/SRPO_JUDGE_TOKENIZER_DIR: is required/);
    await expect(run(['--tokenizer', 't', '--reward-url', 'http://r/'])).rejects.toThrow(/SRPO_JUDGE_POLICIES: is required/);
    await expect(
      run(['--policy', 'a', '--tokenizer', 't', '--base-url', 'http://j/v1', '--model', 'm', '--rubric', 'r', '--api-key-env', 'NOPE']),
    ).rejects.toThrow(/SRPO_JUDGE_API_KEY_ENV: names NOPE, which is not set/);
  });
});
