import * as path from 'path';
import { ConfigError, EnvReader, LogLevel, repoRoot } from '@srpo/core';
import { KafkaConnectionOptions, readKafkaConnection, TopicCatalogOptions } from '@srpo/events';
import { loadAgentsConfig, policiesInUse, type AgentsConfig } from '../agents-config';
import type { Role } from '@srpo/workflows';

/** The demo's tuned defaults (see docs/demo.md for how they were chosen). */
export const DEMO_DEFAULTS = {
  /** The most training time: the demo normally ends before, once the target is held (docs/demo.md). */
  seconds: 1500,
  /** End early once every workflow's success over the last `endWindowSeconds` is at least this (its 95 % interval's lower bound). */
  target: 0.9,
  /** Episodes each workflow needs in that window before the target can count as held. */
  targetMinEpisodes: 500,
  /**
   * Untied output head: with the input embedding doubling as the output head, a token pushed
   * down as an output (negative advantages early on) also loses its input representation, and
   * a policy can stop emitting it in every context. Its groups then all agree on the wrong
   * answer, are degenerate, and nothing brings the token back (the aggregator of a collapsed
   * run never wrote digit 2 again; docs/demo.md). In process (1,200 updates, seeds 4-15), tied:
   * 7 of 12 seeds ended with a workflow under 90 %; untied: none (lowest 95.5 %).
   */
  model: '{"vocabSize":32,"dModel":32,"nLayers":2,"nHeads":2,"maxSeqLen":16,"tiedEmbeddings":false}',
  lr: '5e-4',
  /**
   * Sampling temperature of the agents (the learners score at the temperature each set was
   * sampled at, so ratios stay exact). At 1 the aggregator policy can collapse onto a wrong
   * answer for some inputs: every rollout of a group then agrees, the group is degenerate
   * (zero advantage), and nothing moves it again (seen over Kafka in 2 of 3 runs: aggregator
   * reward stuck at 0.78 with 30 % of its groups all at 0.55, one slot right). 1.5 keeps
   * enough mass on the other tokens; see docs/demo.md.
   */
  temperature: '1.5',
  setsPerUpdate: 64,
  groupSize: 16,
  maxPolicyLag: 8,
  rawPartitions: 2,
  derivedPartitions: 1,
  httpPort: 3000,
  startEpisodes: 160,
  endWindowSeconds: 60,
  recentEpisodes: 256,
} as const;

export interface LearnerPlan {
  policyId: string;
  roles: Role[];
  seed: number;
  httpPort: number;
  sqlitePath: string;
  logFile: string;
}

export interface DemoConfig {
  runId: string;
  runDir: string;
  seconds: number;
  /** True when KAFKA_BROKERS is set: nothing local is started. */
  externalKafka: boolean;
  kafka: KafkaConnectionOptions;
  localKafka: { port: number; dir?: string };
  topics: TopicCatalogOptions & { prefix: string };
  checkpointDir: string;
  learners: LearnerPlan[];
  agents: AgentsConfig;
  /** The materializer's app id (consumer groups `<id>.sets`, `<id>.groups`). */
  materializerAppId: string;
  /** Environment of every child: the caller's, then the demo's settings. */
  childEnv: Record<string, string>;
  learnerEnv: (l: LearnerPlan) => Record<string, string>;
  serve: boolean;
  /**
   * End early once every workflow's success over the last `endWindowMs` has a 95 % Wilson
   * interval wholly at or above this (0: never end early on success).
   */
  target: number;
  targetMinEpisodes: number;
  /** End once every policy has applied this many updates (0: no such limit). Progress, not wall time, for tests. */
  updates: number;
  startEpisodes: number;
  endWindowMs: number;
  recentEpisodes: number;
  logIntervalMs: number;
  logLevel: LogLevel;
}

export interface DemoFlags {
  seconds?: number;
  serve?: boolean;
  target?: number;
  updates?: number;
  /** `--model DIR`: a Hugging Face model directory as every policy's version 0 (SRPO_MODEL_DIR). */
  model?: string;
}

/**
 * The demo's configuration: what `srpo demo` reads from the environment (and
 * its flags), validated before any process starts. Variables it does not set
 * itself pass through to the learners, the materializer and the agents, so
 * every app's own variables (SRPO_OBJECTIVE, SRPO_CLIP_LOW, SRPO_AGENTS_*, ...) work.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | `SRPO_DEMO_SECONDS` | 1500 | the most training time (`--seconds` wins); the run normally ends earlier, at the target |
 * | `SRPO_DEMO_TARGET` | 0.9 | end once every workflow's last-`SRPO_DEMO_END_WINDOW_SECONDS` success has its 95 % interval at or above this (`--target`; 0: never early) |
 * | `SRPO_DEMO_TARGET_MIN_EPISODES` | 500 | episodes per workflow in that window before the target can count |
 * | `SRPO_DEMO_UPDATES` | 0 (off) | end once every policy has applied this many updates (`--updates`) |
 * | `SRPO_DEMO_DIR` | `.srpo/demo/<run id>` | audit databases, checkpoints and process logs |
 * | `SRPO_DEMO_HTTP_PORT` | 3000 | first learner's HTTP port; the next learners take the next free ports |
 * | `SRPO_DEMO_SERVE` | false | keep the learners (audit API) up after training until Ctrl-C (`--serve`) |
 * | `SRPO_DEMO_START_EPISODES` | 160 | episodes per workflow in the "start" success rate |
 * | `SRPO_DEMO_END_WINDOW_SECONDS` | 60 | the "end" success rate covers this last stretch (at most half the run) |
 * | `SRPO_DEMO_RECENT_EPISODES` | 256 | window of the live success rates |
 * | `SRPO_TOPIC_PREFIX` | `srpo.demo.<run id>.` | fresh topics per run, so runs never mix |
 * | `SRPO_MODEL_CONFIG` | `{"vocabSize":32,"dModel":32,"nLayers":2,"nHeads":2,"maxSeqLen":16,"tiedEmbeddings":false}` | shape of every policy |
 * | `SRPO_MODEL_DIR` | unset | a Hugging Face model directory as every policy's version 0 instead (`--model`); learners and agents get it |
 * | `SRPO_LR` / `SRPO_SETS_PER_UPDATE` / `SRPO_MAX_POLICY_LAG` | 5e-4 / 64 / 8 | learner settings; with `--model` (a Hugging Face model), `SRPO_LR` is left to the learner's default by model kind |
 * | `SRPO_SESSION_TIMEOUT_MS` | 10000 | the learners' consumer session timeout; with `--model`, left to the learner's default by model kind |
 * | `SRPO_AGENTS_GROUP_SIZE` / `SRPO_AGENTS_WORKFLOWS` / `SRPO_AGENTS_POLICIES` | 16 / `fixed,joint,routed` / three policies | agents settings; one learner per policy |
 * | `SRPO_AGENTS_TEMPERATURE` | 1.5 | the agents' sampling temperature (their own default is 1) |
 * | `SRPO_RAW_PARTITIONS` / `SRPO_DERIVED_PARTITIONS` | 2 / 1 | partitions of the run's topics |
 * | `KAFKA_BROKERS` | unset: the local broker is started | an external cluster |
 * | `SRPO_KAFKA_PORT` / `SRPO_KAFKA_DIR` | 9092 / `.srpo/kafka` | the local broker |
 * | `SRPO_DEMO_LOG_MS` | 15000 | interval of the progress line when stdout is not a TTY |
 */
export function loadDemoConfig(
  env: Readonly<Record<string, string | undefined>> = process.env,
  flags: DemoFlags = {},
  cwd: string = process.cwd(),
): DemoConfig {
  const r = new EnvReader(env);
  const runId = r.str('SRPO_DEMO_RUN_ID', `${new Date().toISOString().slice(0, 19).replace(/[-:T]/g, '')}-${Math.random().toString(36).slice(2, 6)}`);
  if (!/^[A-Za-z0-9_-]{1,40}$/.test(runId)) throw new ConfigError('SRPO_DEMO_RUN_ID', `must match [A-Za-z0-9_-]{1,40}, got "${runId}"`);
  const seconds = flags.seconds ?? r.int('SRPO_DEMO_SECONDS', DEMO_DEFAULTS.seconds, { min: 5, max: 86_400 });
  if (!Number.isInteger(seconds) || seconds < 5 || seconds > 86_400) throw new ConfigError('--seconds', `must be an integer in [5, 86400], got ${seconds}`);
  const runDir = path.resolve(cwd, r.str('SRPO_DEMO_DIR', path.join(repoRoot(), '.srpo', 'demo', runId)));
  const prefix = r.str('SRPO_TOPIC_PREFIX', `srpo.demo.${runId}.`);
  const localKafka = { port: r.int('SRPO_KAFKA_PORT', 9092, { min: 1, max: 65534 }), dir: r.optionalStr('SRPO_KAFKA_DIR') };
  const externalKafka = r.has('KAFKA_BROKERS');
  const kafka = readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-demo'));
  if (!externalKafka) kafka.brokers = [`127.0.0.1:${localKafka.port}`];
  const checkpointDir = path.join(runDir, 'checkpoints');
  const materializerAppId = r.str('SRPO_APP_ID', `${prefix}materializer`);
  const raw = r.int('SRPO_RAW_PARTITIONS', DEMO_DEFAULTS.rawPartitions, { min: 1, max: 1024 });
  const derived = r.int('SRPO_DERIVED_PARTITIONS', DEMO_DEFAULTS.derivedPartitions, { min: 1, max: 1024 });
  const setsPerUpdate = r.int('SRPO_SETS_PER_UPDATE', DEMO_DEFAULTS.setsPerUpdate, { min: 1, max: 100_000 });
  const seed = r.int('SRPO_SEED', 0, { min: 0, max: 2 ** 31 - 1 });

  const modelDir =
    flags.model !== undefined ? path.resolve(cwd, flags.model) : r.has('SRPO_MODEL_DIR') ? path.resolve(cwd, r.str('SRPO_MODEL_DIR', '')) : undefined;
  if (modelDir !== undefined && r.has('SRPO_MODEL_CONFIG')) {
    throw new ConfigError(
      flags.model !== undefined ? '--model' : 'SRPO_MODEL_DIR',
      'set either a Hugging Face model directory or SRPO_MODEL_CONFIG (the project transformer), not both',
    );
  }
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
  Object.assign(childEnv, {
    KAFKA_BROKERS: kafka.brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_RAW_PARTITIONS: String(raw),
    SRPO_DERIVED_PARTITIONS: String(derived),
    SRPO_APP_ID: materializerAppId,
    SRPO_CHECKPOINT_DIR: checkpointDir,
    SRPO_SETS_PER_UPDATE: String(setsPerUpdate),
    SRPO_AGENTS_GROUP_SIZE: r.str('SRPO_AGENTS_GROUP_SIZE', String(DEMO_DEFAULTS.groupSize)),
    SRPO_AGENTS_RUN_ID: r.str('SRPO_AGENTS_RUN_ID', runId.replace(/[^A-Za-z0-9_-]/g, '')),
    // A Hugging Face model keeps the learner's defaults by model kind (learning rate, session timeout; docs/learner.md)
    // unless set here; the demo's own rate and short timeout are for its small transformer.
    ...(modelDir !== undefined
      ? { SRPO_MODEL_DIR: modelDir }
      : {
          SRPO_MODEL_CONFIG: r.str('SRPO_MODEL_CONFIG', DEMO_DEFAULTS.model),
          SRPO_LR: r.str('SRPO_LR', DEMO_DEFAULTS.lr),
          // A stopped process's partitions move on quickly; the demo restarts nothing, but a crash should not stall it for 30 s.
          SRPO_SESSION_TIMEOUT_MS: r.str('SRPO_SESSION_TIMEOUT_MS', '10000'),
        }),
    SRPO_AGENTS_TEMPERATURE: r.str('SRPO_AGENTS_TEMPERATURE', DEMO_DEFAULTS.temperature),
    SRPO_MAX_POLICY_LAG: r.str('SRPO_MAX_POLICY_LAG', String(DEMO_DEFAULTS.maxPolicyLag)),
    SRPO_LOG_LEVEL: r.str('SRPO_LOG_LEVEL', 'info'),
    KAFKAJS_NO_PARTITIONER_WARNING: '1',
  });
  // Search needs ProGPO's progress fallback: its groups often fail as a whole.
  const agents = loadAgentsConfig(childEnv, cwd);
  if (agents.workflows.includes('search') && !r.has('SRPO_PROGRESS_FALLBACK')) childEnv.SRPO_PROGRESS_FALLBACK = 'true';
  if (agents.setsPerUpdate !== setsPerUpdate) throw new ConfigError('SRPO_SETS_PER_UPDATE', 'agents and learners must agree');

  const basePort = r.int('SRPO_DEMO_HTTP_PORT', DEMO_DEFAULTS.httpPort, { min: 1, max: 65000 });
  const learners: LearnerPlan[] = policiesInUse(agents).map((policyId, i) => ({
    policyId,
    roles: (Object.entries(agents.rolePolicies) as [Role, string][])
      .filter(([, id]) => id === policyId)
      .map(([role]) => role)
      .sort(),
    seed: seed + i,
    httpPort: basePort + i,
    sqlitePath: path.join(runDir, `learner-${policyId}.sqlite`),
    logFile: path.join(runDir, `learner-${policyId}.log`),
  }));
  const learnerEnv = (l: LearnerPlan): Record<string, string> => ({
    ...childEnv,
    SRPO_POLICY_ID: l.policyId,
    SRPO_POLICY_ROLES: l.roles.join(','),
    SRPO_SEED: String(l.seed),
    SRPO_SQLITE_PATH: l.sqlitePath,
    SRPO_HTTP_PORT: String(l.httpPort),
    SRPO_CONSUMER_GROUP: `${prefix}learner.${l.policyId}`,
    SRPO_CLIENT_ID: `srpo-learner-${l.policyId}`,
  });
  const endWindowSeconds = r.int('SRPO_DEMO_END_WINDOW_SECONDS', DEMO_DEFAULTS.endWindowSeconds, { min: 1 });
  const target = flags.target ?? r.num('SRPO_DEMO_TARGET', DEMO_DEFAULTS.target, { min: 0, max: 1 });
  if (!(target >= 0 && target <= 1)) throw new ConfigError('--target', `must be a success rate in [0, 1], got ${target}`);
  const updates = flags.updates ?? r.int('SRPO_DEMO_UPDATES', 0, { min: 0, max: 10_000_000 });
  if (!Number.isInteger(updates) || updates < 0) throw new ConfigError('--updates', `must be a non-negative integer, got ${updates}`);
  return {
    runId,
    runDir,
    seconds,
    externalKafka,
    kafka,
    localKafka,
    topics: { prefix, rawPartitions: raw, derivedPartitions: derived },
    checkpointDir,
    learners,
    agents,
    materializerAppId,
    childEnv,
    learnerEnv,
    serve: flags.serve ?? r.bool('SRPO_DEMO_SERVE', false),
    target,
    targetMinEpisodes: r.int('SRPO_DEMO_TARGET_MIN_EPISODES', DEMO_DEFAULTS.targetMinEpisodes, { min: 1 }),
    updates,
    startEpisodes: r.int('SRPO_DEMO_START_EPISODES', DEMO_DEFAULTS.startEpisodes, { min: 1 }),
    endWindowMs: Math.min(endWindowSeconds, seconds / 2) * 1000,
    recentEpisodes: r.int('SRPO_DEMO_RECENT_EPISODES', DEMO_DEFAULTS.recentEpisodes, { min: 1 }),
    logIntervalMs: r.int('SRPO_DEMO_LOG_MS', 15_000, { min: 100 }),
    logLevel: r.oneOf('SRPO_DEMO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'warn'),
  };
}
