import * as path from 'path';
import { BACKEND_REQUESTS, BackendRequest, ConfigError, EnvReader, Logger, LogLevel, tfBackendSettings, type TfBackendSettings } from '@srpo/core';
import { KafkaConnectionOptions, readKafkaConnection, TopicCatalogOptions } from '@srpo/events';
import { HfTokenizer, readHfConfig } from '@srpo/hf';
import {
  checkArithmeticSettings,
  checkSearchSettings,
  DEFAULT_ARITHMETIC,
  DEFAULT_ROLE_POLICIES,
  DEFAULT_SEARCH,
  ROLES,
  WORKFLOW_NAMES,
  WORKFLOW_ROLES,
  type ArithmeticSettings,
  type Role,
  type SearchSettings,
  type WorkflowName,
} from '@srpo/workflows';

export interface AgentsConfig {
  kafka: KafkaConnectionOptions;
  topics: TopicCatalogOptions;
  workflows: WorkflowName[];
  /** role → policy id, for the roles the workflows use. */
  rolePolicies: Partial<Record<Role, string>>;
  /** Absolute; version 0 is read from `<dir>/<policyId>/v0/` when no PolicyVersion was announced yet. */
  checkpointDir: string;
  /**
   * Absolute; the Hugging Face directory the learners' SRPO_MODEL_DIR names. Its tokenizer binds the
   * workflows' symbols to model ids (libs/workflows/src/symbol-binding.ts), and every policy loaded must be on this base.
   * Unset: the policies are the project's transformer, whose ids are the symbols.
   */
  modelDir?: string;
  groupSize: number;
  temperature: number;
  seed: number;
  arithmetic: ArithmeticSettings;
  search: SearchSettings;
  /** Must match the learners' SRPO_SETS_PER_UPDATE: the unit of flow control. */
  setsPerUpdate: number;
  /** How many updates' worth of sets the agents may run ahead of the newest version (0: no flow control). */
  maxAheadUpdates: number;
  /** Longest wait for a new version when ahead; then the agents go on anyway (a learner may skip groups). */
  versionWaitMs: number;
  startupTimeoutMs: number;
  /** Hold outcomes until the materializer consumed their transitions (see OutcomeGate). */
  outcomeGate: { enabled: boolean; groupId: string; timeoutMs: number };
  /** Stop after this many tasks (0: run until stopped). */
  maxTasks: number;
  /** Prefix of every task, episode and output id; unique per run so ids never collide on shared topics. */
  runId: string;
  backend: BackendRequest;
  /** How the backend loads: `SRPO_WEBGPU_FLAGS`, `SRPO_DAWN_NODE`, `SRPO_TF_CUDA`, `LD_LIBRARY_PATH` (tfBackendSettings). */
  backendSettings: TfBackendSettings;
  statsIntervalMs: number;
  logLevel: LogLevel;
}

const POLICY_ID = /^[A-Za-z0-9._-]+$/;
const RUN_ID = /^[A-Za-z0-9_-]{1,40}$/;

/**
 * The agents' configuration; the only module of the app that reads the
 * environment. Fails at boot with a `ConfigError` naming the variable.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | `KAFKA_*` | local broker | see readKafkaConnection |
 * | `SRPO_TOPIC_PREFIX` | `srpo.` | topic names |
 * | `SRPO_CLIENT_ID` | `srpo-agents` | Kafka client id |
 * | `SRPO_AGENTS_WORKFLOWS` | `fixed,joint,routed` | workflows played, interleaved round-robin (`fixed`, `joint`, `routed`, `search`) |
 * | `SRPO_AGENTS_POLICIES` | `solver=actor,worker=actor,searcher=actor,checker=judge,router=judge,aggregator=aggregator` | `role=policyId` pairs; one id for every role shares one policy |
 * | `SRPO_CHECKPOINT_DIR` | `.srpo/checkpoints` | the learners' checkpoint root (version 0 is read from it) |
 * | `SRPO_MODEL_DIR` | unset | the learners' Hugging Face model directory: its tokenizer binds the workflow symbols to token ids, and every policy must be on this base |
 * | `SRPO_AGENTS_GROUP_SIZE` | 16 | rollouts per task: the declared advantage-group size G |
 * | `SRPO_AGENTS_TEMPERATURE` | 1 | sampling temperature |
 * | `SRPO_AGENTS_SEED` | 0 | seed of tasks and sampling |
 * | `SRPO_AGENTS_MODULUS` | 4 | digits are mod k |
 * | `SRPO_AGENTS_WORKERS` | 2 | workers N of joint and routed tasks (1..4) |
 * | `SRPO_AGENTS_REVERSE_LENGTH` | 1 | digits of a fixed-workflow task (answered reversed, each decremented mod k) |
 * | `SRPO_AGENTS_FORMAT_BONUS` | 0.1 | reward of a well-formed wrong token |
 * | `SRPO_AGENTS_BLANK_PROBABILITY` | 0.5 | chance that a routed slot is empty |
 * | `SRPO_AGENTS_SEARCH_DOCS` / `SRPO_AGENTS_SEARCH_TURNS` | 4 / 3 | search store size and turns |
 * | `SRPO_SETS_PER_UPDATE` | 16 | the learners' sets per update (flow-control unit) |
 * | `SRPO_AGENTS_MAX_AHEAD` | 3 | updates' worth of sets the agents may run ahead of the newest version; 0 disables |
 * | `SRPO_AGENTS_VERSION_WAIT_MS` | 15000 | longest wait for a new version before going on |
 * | `SRPO_AGENTS_STARTUP_TIMEOUT_MS` | 120000 | longest wait for version 0 of every policy |
 * | `SRPO_AGENTS_OUTCOME_GATE` | true | send each task's outcomes only once the materializer consumed its transitions |
 * | `SRPO_APP_ID` | `<prefix>materializer` | the materializer's app id; the gate watches its `<app id>.sets` consumer group |
 * | `SRPO_AGENTS_OUTCOME_TIMEOUT_MS` | 30000 | longest an outcome is held before it is sent anyway |
 * | `SRPO_AGENTS_MAX_TASKS` | 0 | stop after this many tasks; 0 runs until SIGTERM |
 * | `SRPO_AGENTS_RUN_ID` | random | prefix of all ids of this run |
 * | `SRPO_AGENTS_STATS_MS` | 10000 | interval of the stats log line |
 * | `SRPO_BACKEND` | `auto` | TensorFlow.js backend |
 * | `SRPO_WEBGPU_FLAGS` | | JSON object of tfjs-backend-webgpu flags (tuning runs) |
 * | `SRPO_DAWN_NODE` | | path of dawn.node, for a bundle that carries it |
 * | `SRPO_TF_CUDA` | | `11` or `12`: the CUDA generation tfjs-node-gpu's libtensorflow needs, where its files do not tell |
 * | `SRPO_LOG_LEVEL` | `info` | `debug`, `info`, `warn`, `error` |
 */
export function loadAgentsConfig(env: Readonly<Record<string, string | undefined>> = process.env, cwd: string = process.cwd()): AgentsConfig {
  const r = new EnvReader(env);
  const workflows = readWorkflows(r);
  const rolePolicies = readRolePolicies(r, workflows);
  const modulus = r.int('SRPO_AGENTS_MODULUS', DEFAULT_ARITHMETIC.modulus, { min: 2, max: 8 });
  const arithmetic = ConfigError.guard('SRPO_AGENTS_WORKERS', () =>
    checkArithmeticSettings({
      modulus,
      workers: r.int('SRPO_AGENTS_WORKERS', DEFAULT_ARITHMETIC.workers, { min: 1, max: 4 }),
      reverseLength: r.int('SRPO_AGENTS_REVERSE_LENGTH', DEFAULT_ARITHMETIC.reverseLength, { min: 1, max: 4 }),
      formatBonus: r.num('SRPO_AGENTS_FORMAT_BONUS', DEFAULT_ARITHMETIC.formatBonus, { min: 0, max: 0.99 }),
      blankProbability: r.num('SRPO_AGENTS_BLANK_PROBABILITY', DEFAULT_ARITHMETIC.blankProbability, { min: 0, max: 0.99 }),
    }),
  );
  const search = ConfigError.guard('SRPO_AGENTS_SEARCH_DOCS', () =>
    checkSearchSettings({
      modulus,
      docs: r.int('SRPO_AGENTS_SEARCH_DOCS', DEFAULT_SEARCH.docs, { min: 2, max: 6 }),
      turns: r.int('SRPO_AGENTS_SEARCH_TURNS', DEFAULT_SEARCH.turns, { min: 1, max: 6 }),
    }),
  );
  const prefix = r.str('SRPO_TOPIC_PREFIX', 'srpo.');
  const runId = r.str('SRPO_AGENTS_RUN_ID', Math.random().toString(36).slice(2, 10));
  if (!RUN_ID.test(runId)) throw new ConfigError('SRPO_AGENTS_RUN_ID', `must match [A-Za-z0-9_-]{1,40}, got "${runId}"`);
  const config: AgentsConfig = {
    kafka: readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-agents')),
    topics: { prefix },
    workflows,
    rolePolicies,
    checkpointDir: path.resolve(cwd, r.str('SRPO_CHECKPOINT_DIR', '.srpo/checkpoints')),
    modelDir: readModelDir(r, cwd),
    groupSize: r.int('SRPO_AGENTS_GROUP_SIZE', 16, { min: 2, max: 256 }),
    temperature: r.num('SRPO_AGENTS_TEMPERATURE', 1, { min: 0.05, max: 10 }),
    seed: r.int('SRPO_AGENTS_SEED', 0, { min: 0, max: 2 ** 31 - 1 }),
    arithmetic,
    search,
    setsPerUpdate: r.int('SRPO_SETS_PER_UPDATE', 16, { min: 1, max: 100_000 }),
    maxAheadUpdates: r.int('SRPO_AGENTS_MAX_AHEAD', 3, { min: 0, max: 10_000 }),
    versionWaitMs: r.int('SRPO_AGENTS_VERSION_WAIT_MS', 15_000, { min: 0 }),
    startupTimeoutMs: r.int('SRPO_AGENTS_STARTUP_TIMEOUT_MS', 120_000, { min: 0 }),
    outcomeGate: {
      enabled: r.bool('SRPO_AGENTS_OUTCOME_GATE', true),
      groupId: `${r.str('SRPO_APP_ID', `${prefix}materializer`)}.sets`,
      timeoutMs: r.int('SRPO_AGENTS_OUTCOME_TIMEOUT_MS', 30_000, { min: 0 }),
    },
    maxTasks: r.int('SRPO_AGENTS_MAX_TASKS', 0, { min: 0 }),
    runId,
    backend: r.oneOf('SRPO_BACKEND', BACKEND_REQUESTS, 'auto'),
    backendSettings: tfBackendSettings(r),
    statsIntervalMs: r.int('SRPO_AGENTS_STATS_MS', 10_000, { min: 100 }),
    logLevel: r.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info'),
  };
  return config;
}

/** Applies the process-wide settings of a loaded config (log level). */
export function applyAgentsConfig(config: AgentsConfig): void {
  Logger.configure({ level: config.logLevel });
}

/** Checked at boot: config.json resolves and tokenizer.json builds, so a bad directory fails before Kafka is touched. */
function readModelDir(r: EnvReader, cwd: string): string | undefined {
  const raw = r.optionalStr('SRPO_MODEL_DIR');
  if (raw === undefined) return undefined;
  const dir = path.resolve(cwd, raw);
  ConfigError.guard('SRPO_MODEL_DIR', () => {
    readHfConfig(dir);
    HfTokenizer.fromDirectory(dir);
  });
  return dir;
}

function readWorkflows(r: EnvReader): WorkflowName[] {
  const names = r.list('SRPO_AGENTS_WORKFLOWS', ['fixed', 'joint', 'routed']);
  if (names.length === 0) throw new ConfigError('SRPO_AGENTS_WORKFLOWS', 'lists no workflow');
  for (const n of names) {
    if (!(WORKFLOW_NAMES as readonly string[]).includes(n)) {
      throw new ConfigError('SRPO_AGENTS_WORKFLOWS', `unknown workflow "${n}"; expected some of ${WORKFLOW_NAMES.join(', ')}`);
    }
  }
  const dup = names.find((n, i) => names.indexOf(n) !== i);
  if (dup) throw new ConfigError('SRPO_AGENTS_WORKFLOWS', `lists ${dup} twice`);
  return names as WorkflowName[];
}

/** Parses `role=policy,...` over the defaults and checks that every role the workflows use has a valid policy id. */
export function readRolePolicies(r: EnvReader, workflows: readonly WorkflowName[]): Partial<Record<Role, string>> {
  const map: Partial<Record<Role, string>> = { ...DEFAULT_ROLE_POLICIES };
  for (const pair of r.list('SRPO_AGENTS_POLICIES', [])) {
    const [role, policy, ...rest] = pair.split('=').map((s) => s.trim());
    if (policy === undefined || rest.length > 0 || role === '' || policy === '') {
      throw new ConfigError('SRPO_AGENTS_POLICIES', `expected role=policyId pairs, got "${pair}"`);
    }
    if (!(ROLES as readonly string[]).includes(role)) throw new ConfigError('SRPO_AGENTS_POLICIES', `unknown role "${role}"; roles are ${ROLES.join(', ')}`);
    if (!POLICY_ID.test(policy) || policy === '.' || policy === '..') {
      throw new ConfigError('SRPO_AGENTS_POLICIES', `policy id "${policy}" must match [A-Za-z0-9._-]+ (it names checkpoint directories)`);
    }
    map[role as Role] = policy;
  }
  const used = new Set(workflows.flatMap((w) => WORKFLOW_ROLES[w]));
  return Object.fromEntries(Object.entries(map).filter(([role]) => used.has(role as Role)));
}

/** The distinct policy ids the configured workflows use, sorted. */
export function policiesInUse(config: Pick<AgentsConfig, 'rolePolicies'>): string[] {
  return [...new Set(Object.values(config.rolePolicies))].sort();
}
