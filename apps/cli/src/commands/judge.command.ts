import { Command, InvalidArgumentError, Option } from 'commander';
import { EnvReader, Logger, MetricsSink, onShutdownSignals, serveMetrics } from '@srpo/core';
import { createKafka, EventCodec, topicCatalog } from '@srpo/events';
import { HfTokenizer } from '@srpo/hf';
import { CONTENT_KEY_STORE_VARIABLES, createScorer, JUDGE_MODES, JudgeService, readJudgeConfig } from '@srpo/judge';
import { describeStore, KeyStore } from '@srpo/store';
import type { CliConfig } from '../cli-config';
import { addFlags, flagsToEnv, METRICS_PORT_FLAG, type FlagSpec } from './app-flags';

type Env = Readonly<Record<string, string | undefined>>;

/**
 * `srpo judge`'s flags. Each sets one variable read by libs/judge's `readJudgeConfig` (the one
 * place they are validated, naming the variable); the API key has no flag, only the name of the
 * variable that holds it (a command line is visible to every user of the machine).
 */
export const JUDGE_FLAGS: readonly FlagSpec[] = [
  {
    flag: '--mode',
    value: '<mode>',
    variable: 'SRPO_JUDGE_MODE',
    default: 'output',
    help: 'output: each output alone; episode: the finished episode',
    kind: 'choice',
    choices: JUDGE_MODES,
  },
  {
    flag: '--base-url',
    value: '<url>',
    variable: 'SRPO_JUDGE_BASE_URL',
    default: 'unset',
    help: "the judge's OpenAI base URL, e.g. https://api.openai.com/v1",
    kind: 'string',
  },
  { flag: '--model', value: '<name>', variable: 'SRPO_JUDGE_MODEL', default: 'unset', help: 'the judge model', kind: 'string' },
  {
    flag: '--api-key-env',
    value: '<name>',
    variable: 'SRPO_JUDGE_API_KEY_ENV',
    default: 'unset',
    help: 'the environment variable holding the API key',
    kind: 'string',
  },
  {
    flag: '--rubric',
    value: '<file>',
    variable: 'SRPO_JUDGE_RUBRIC',
    default: 'unset',
    help: 'rubric template with {{prompt}} and {{response}} (its SHA-256 is recorded)',
    kind: 'path',
  },
  {
    flag: '--score-range',
    value: '<min..max>',
    variable: 'SRPO_JUDGE_SCORE_RANGE',
    default: '0..10',
    help: "the judge's score range, mapped onto rewards 0..1",
    kind: 'string',
  },
  {
    flag: '--success-threshold',
    value: '<x>',
    variable: 'SRPO_JUDGE_SUCCESS_THRESHOLD',
    default: "the range's midpoint; 0.5 for plugins",
    help: 'success when the raw score (a plugin: the reward) is at least this',
    kind: 'number',
  },
  {
    flag: '--reward-source',
    value: '<name>',
    variable: 'SRPO_JUDGE_REWARD_SOURCE',
    default: 'judge; program for plugins',
    help: "the outcomes' rewardSource (its reward window, its late-outcome metrics' label)",
    kind: 'string',
  },
  { flag: '--timeout-ms', value: '<ms>', variable: 'SRPO_JUDGE_TIMEOUT_MS', default: '30000', help: 'per-request timeout', kind: 'int', min: 1, max: 600_000 },
  {
    flag: '--concurrency',
    value: '<n>',
    variable: 'SRPO_JUDGE_CONCURRENCY',
    default: '4',
    help: 'judge requests in flight at once',
    kind: 'int',
    min: 1,
    max: 256,
  },
  { flag: '--max-tokens', value: '<n>', variable: 'SRPO_JUDGE_MAX_TOKENS', default: '256', help: "the judge's max_tokens", kind: 'int', min: 1, max: 32_768 },
  {
    flag: '--reward-module',
    value: '<file>',
    variable: 'SRPO_JUDGE_REWARD_MODULE',
    default: 'unset',
    help: 'a verifiable reward: a .js (or .ts) module exporting (input) => number',
    kind: 'path',
  },
  {
    flag: '--reward-url',
    value: '<url>',
    variable: 'SRPO_JUDGE_REWARD_URL',
    default: 'unset',
    help: 'a verifiable reward: an endpoint that takes the input as JSON and answers {"reward": x}',
    kind: 'string',
  },
  {
    flag: '--tokenizer',
    value: '<dir>',
    variable: 'SRPO_JUDGE_TOKENIZER_DIR',
    default: 'required',
    help: "a Hugging Face directory whose tokenizer.json decodes the outputs' token ids",
    kind: 'path',
  },
  {
    flag: '--group',
    value: '<id>',
    variable: 'SRPO_JUDGE_GROUP',
    default: '<prefix>judge',
    help: 'consumer group and transactional id prefix; one per judge',
    kind: 'string',
  },
  {
    flag: '--start',
    value: '<where>',
    variable: 'SRPO_JUDGE_START',
    default: 'latest',
    help: 'where a new group starts: latest (outputs from now on) or earliest (every output in the log is judged)',
    kind: 'choice',
    choices: ['earliest', 'latest'],
  },
  {
    flag: '--max-pending-episodes',
    value: '<n>',
    variable: 'SRPO_JUDGE_MAX_PENDING_EPISODES',
    default: '10000',
    help: 'episodes held per partition (episode mode)',
    kind: 'int',
    min: 1,
  },
  {
    flag: '--max-text-chars',
    value: '<n>',
    variable: 'SRPO_JUDGE_MAX_TEXT_CHARS',
    default: '32768',
    help: 'longest prompt + response judged',
    kind: 'int',
    min: 1,
  },
  {
    flag: '--pending-ttl-ms',
    value: '<ms>',
    variable: 'SRPO_JUDGE_PENDING_TTL_MS',
    default: '600000',
    help: 'event time an episode may wait for its end (episode mode)',
    kind: 'int',
    min: 1,
  },
  METRICS_PORT_FLAG,
];

/**
 * Whether the judge opens sealed outputs (docs/erasure.md): only when the store is named
 * (SRPO_DATABASE_URL or SRPO_SQLITE_PATH), never on the CLI's default SQLite path, where a judge
 * that was not pointed at the learner's store would find no key and count every sealed output
 * as erased.
 */
export function judgeOpensSealed(env: Env): boolean {
  const r = new EnvReader(env);
  return r.has('SRPO_DATABASE_URL') || r.has('SRPO_SQLITE_PATH');
}

const collect = (value: string, previous: string[] = []): string[] => {
  if (value.trim() === '') throw new InvalidArgumentError('must not be empty (sets SRPO_JUDGE_POLICIES)');
  return [...previous, ...value.split(',').map((v) => v.trim())];
};

/**
 * `srpo judge`: scores the outputs (or finished episodes) of chosen policies with an LLM judge
 * or a verifiable reward and writes EpisodeOutcome events (libs/judge). Runs until Ctrl-C.
 */
export function judgeCommand(config: () => CliConfig, env: Env = process.env): Command {
  const cmd = new Command('judge').description(
    'judge outputs or episodes of chosen policies with any OpenAI-compatible endpoint and a rubric (or a verifiable-reward module or endpoint), and write EpisodeOutcome events naming the judge (docs/rewards.md#judges); ' +
      `sealed outputs are opened with the content keys of the store named by ${CONTENT_KEY_STORE_VARIABLES}`,
  );
  cmd.addOption(new Option('--policy <id>', 'a policy whose outputs are judged; repeatable [SRPO_JUDGE_POLICIES, required]').argParser(collect));
  addFlags(cmd, JUDGE_FLAGS);
  cmd.action(async (opts: Record<string, unknown>) => {
    const cli = config();
    const policies = opts.policy as string[] | undefined;
    const merged = { ...env, ...flagsToEnv(JUDGE_FLAGS, opts), ...(policies ? { SRPO_JUDGE_POLICIES: policies.join(',') } : {}) };
    const c = readJudgeConfig(new EnvReader(merged), process.cwd(), cli.topics.prefix ?? 'srpo.');
    const log = new Logger('judge');
    const scorer = createScorer(c);
    const metrics = new MetricsSink();
    const tokenizer = HfTokenizer.fromDirectory(c.tokenizerDir);
    // Content keys from the learner's store, when it is named; the CLI config read it (same variables as the learner).
    const keys = judgeOpensSealed(env) ? await KeyStore.open(cli.store) : undefined;
    const service = new JudgeService({
      kafka: createKafka(cli.kafka),
      catalog: topicCatalog(cli.topics),
      codec: new EventCodec(undefined, { maxPayloadBytes: cli.maxPayloadBytes, registry: cli.schemaRegistry }),
      scorer,
      tokenizer,
      metrics,
      mode: c.mode,
      policies: c.policies,
      groupId: c.groupId,
      start: c.start,
      concurrency: c.concurrency,
      successThreshold: c.successThreshold,
      rewardSource: c.rewardSource,
      maxPendingEpisodes: c.maxPendingEpisodes,
      maxTextChars: c.maxTextChars,
      pendingTtlMs: c.pendingTtlMs,
      sessionTimeoutMs: c.sessionTimeoutMs,
      keys,
    });
    let metricsServer: Awaited<ReturnType<typeof serveMetrics>> | undefined;
    try {
      metricsServer = c.metricsPort > 0 ? await serveMetrics(metrics, c.metricsPort) : undefined;
      await service.start();
    } catch (e) {
      metricsServer?.close();
      await keys?.close();
      throw e;
    }
    // The verifier and what it records; never the API key. Where content keys come from: the store, without credentials.
    log.info('judge started', {
      mode: c.mode,
      policies: c.policies,
      verifier: scorer.verifier,
      group: c.groupId,
      metricsPort: c.metricsPort,
      contentKeys: keys ? describeStore(cli.store) : `none (sealed outputs skipped; set ${CONTENT_KEY_STORE_VARIABLES})`,
    });
    await new Promise<void>((resolve) => {
      onShutdownSignals(async () => {
        await service.stop();
        metricsServer?.close();
        await keys?.close();
        resolve();
      }, log);
    });
  });
  return cmd;
}
