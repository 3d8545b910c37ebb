import * as path from 'path';
import { ConfigError, EnvReader } from '@srpo/core';
import { parseScoreRange, type ScoreRange } from './score-parser';

export const JUDGE_MODES = ['output', 'episode'] as const;
export type JudgeMode = (typeof JUDGE_MODES)[number];

/** Where rewards come from: exactly one of an LLM judge, a reward module, a reward endpoint. */
export type RewardSourceConfig =
  | { kind: 'judge'; baseUrl: string; model: string; apiKey?: string; rubricFile: string; range: ScoreRange; maxTokens: number; temperature: number }
  | { kind: 'module'; file: string }
  | { kind: 'http'; url: string; apiKey?: string };

/** `srpo judge`'s settings, validated once at start; see docs/rewards.md#judges for each variable. */
export interface JudgeConfig {
  mode: JudgeMode;
  policies: string[];
  source: RewardSourceConfig;
  /** A Hugging Face model directory whose tokenizer.json decodes the outputs' token ids. */
  tokenizerDir: string;
  /** `success` is `rawScore >= successThreshold` (the judge's scale; a plugin's reward). */
  successThreshold: number;
  /** `EpisodeOutcome.rewardSource`: `judge` for the LLM judge, `program` for a plugin, unless set. */
  rewardSource: string;
  timeoutMs: number;
  concurrency: number;
  groupId: string;
  /** Where a group without committed offsets starts: `latest` (only what comes from now on) or `earliest` (the whole log: every output in it is judged). */
  start: 'earliest' | 'latest';
  maxPendingEpisodes: number;
  maxTextChars: number;
  pendingTtlMs: number;
  /** 0: no /metrics endpoint. */
  metricsPort: number;
  sessionTimeoutMs: number;
}

const URL_VARIABLE_CHECK = (variable: string, value: string): string =>
  ConfigError.guard(variable, () => {
    const u = new URL(value);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`expected an http(s) URL, got ${u.protocol}`);
    if (u.username !== '' || u.password !== '') throw new Error('credentials in the URL would be recorded; use SRPO_JUDGE_API_KEY_ENV');
    return value.replace(/\/+$/, '');
  });

/** The API key, read from the variable that SRPO_JUDGE_API_KEY_ENV names (the key itself never appears on a command line). */
function apiKey(reader: EnvReader): string | undefined {
  const name = reader.optionalStr('SRPO_JUDGE_API_KEY_ENV');
  if (name === undefined) return undefined;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new ConfigError('SRPO_JUDGE_API_KEY_ENV', `"${name}" is not a variable name`);
  if (!reader.has(name)) throw new ConfigError('SRPO_JUDGE_API_KEY_ENV', `names ${name}, which is not set`);
  return reader.str(name);
}

function rewardSource(reader: EnvReader, cwd: string): RewardSourceConfig {
  const judge = reader.has('SRPO_JUDGE_BASE_URL') || reader.has('SRPO_JUDGE_MODEL') || reader.has('SRPO_JUDGE_RUBRIC');
  const module = reader.optionalStr('SRPO_JUDGE_REWARD_MODULE');
  const url = reader.optionalStr('SRPO_JUDGE_REWARD_URL');
  const chosen = [judge, module !== undefined, url !== undefined].filter(Boolean).length;
  if (chosen !== 1)
    throw new ConfigError(
      'SRPO_JUDGE_BASE_URL',
      `give exactly one reward source: an LLM judge (SRPO_JUDGE_BASE_URL, SRPO_JUDGE_MODEL, SRPO_JUDGE_RUBRIC), SRPO_JUDGE_REWARD_MODULE or SRPO_JUDGE_REWARD_URL; got ${chosen}`,
    );
  if (module !== undefined) return { kind: 'module', file: path.resolve(cwd, module) };
  if (url !== undefined) return { kind: 'http', url: URL_VARIABLE_CHECK('SRPO_JUDGE_REWARD_URL', url), apiKey: apiKey(reader) };
  const range = ConfigError.guard('SRPO_JUDGE_SCORE_RANGE', () => parseScoreRange(reader.str('SRPO_JUDGE_SCORE_RANGE', '0..10')));
  return {
    kind: 'judge',
    baseUrl: URL_VARIABLE_CHECK('SRPO_JUDGE_BASE_URL', reader.str('SRPO_JUDGE_BASE_URL')),
    model: reader.str('SRPO_JUDGE_MODEL'),
    apiKey: apiKey(reader),
    rubricFile: path.resolve(cwd, reader.str('SRPO_JUDGE_RUBRIC')),
    range,
    maxTokens: reader.int('SRPO_JUDGE_MAX_TOKENS', 256, { min: 1, max: 32_768 }),
    temperature: reader.num('SRPO_JUDGE_TEMPERATURE', 0, { min: 0, max: 2 }),
  };
}

/** The outcome's `rewardSource` name: what the event schema allows (letters, digits, `.`, `_`, `-`; at most 64). */
function rewardSourceName(reader: EnvReader, fallback: string): string {
  const name = reader.str('SRPO_JUDGE_REWARD_SOURCE', fallback);
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(name))
    throw new ConfigError('SRPO_JUDGE_REWARD_SOURCE', `must be 1-64 letters, digits, '.', '_' or '-', got ${JSON.stringify(name)}`);
  return name;
}

/** Reads `srpo judge`'s variables (the CLI puts its flags among them), failing on the first bad one by name. */
export function readJudgeConfig(reader: EnvReader, cwd: string, topicPrefix: string): JudgeConfig {
  const policies = reader.list('SRPO_JUDGE_POLICIES');
  if (policies.length === 0) throw new ConfigError('SRPO_JUDGE_POLICIES', 'is required: the policies whose outputs are judged (--policy, repeatable)');
  const source = rewardSource(reader, cwd);
  const defaultThreshold = source.kind === 'judge' ? (source.range.min + source.range.max) / 2 : 0.5;
  return {
    mode: reader.oneOf('SRPO_JUDGE_MODE', JUDGE_MODES, 'output'),
    policies,
    source,
    tokenizerDir: path.resolve(cwd, reader.str('SRPO_JUDGE_TOKENIZER_DIR')),
    successThreshold: reader.num('SRPO_JUDGE_SUCCESS_THRESHOLD', defaultThreshold),
    rewardSource: rewardSourceName(reader, source.kind === 'judge' ? 'judge' : 'program'),
    timeoutMs: reader.int('SRPO_JUDGE_TIMEOUT_MS', 30_000, { min: 1, max: 600_000 }),
    concurrency: reader.int('SRPO_JUDGE_CONCURRENCY', 4, { min: 1, max: 256 }),
    groupId: reader.str('SRPO_JUDGE_GROUP', `${topicPrefix}judge`),
    start: reader.oneOf('SRPO_JUDGE_START', ['earliest', 'latest'] as const, 'latest'),
    maxPendingEpisodes: reader.int('SRPO_JUDGE_MAX_PENDING_EPISODES', 10_000, { min: 1, max: 1_000_000 }),
    maxTextChars: reader.int('SRPO_JUDGE_MAX_TEXT_CHARS', 32_768, { min: 1, max: 4_000_000 }),
    pendingTtlMs: reader.int('SRPO_JUDGE_PENDING_TTL_MS', 600_000, { min: 1 }),
    metricsPort: reader.int('SRPO_METRICS_PORT', 0, { min: 0, max: 65_535 }),
    sessionTimeoutMs: reader.int('SRPO_SESSION_TIMEOUT_MS', 30_000, { min: 6_000, max: 300_000 }),
  };
}
