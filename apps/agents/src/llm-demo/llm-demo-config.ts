import * as fs from 'fs';
import * as path from 'path';
import { EnvReader, repoRoot, ValidationError } from '@srpo/core';
import { SMOLLM2_MAKE_COMMAND, smollm2DirProblem, smollm2ModelDir } from '@srpo/hf';
import {
  DEFAULT_WORD_PROBLEM_PLAY,
  WORD_PROBLEM_MAX_GROUP_SIZE,
  WORD_PROBLEM_MAX_HELDOUT_SIZE,
  WORD_PROBLEM_VARIANTS,
  type WordProblemVariant,
} from '@srpo/workflows';
import type { BrokerPlan } from '../demo/local-broker';
import type { LlmDemoRunOptions, UntilRule } from './llm-demo-runner';

/**
 * The LLM demo's defaults. Task, G, temperature and LoRA shape follow the study in
 * bench/studies/llm-task (add-10 learned within minutes there: r 16, alpha 32, every linear layer,
 * G 8 at temperature 0.8, solver only). The learning rate is lower than the PyTorch pilot's 5e-4:
 * over the real loop (paced, TIS), 5e-4 rose and fell back (63 → 74.5 → 64.5 % held-out at
 * versions 0, 8, 14; an unpaced run 63 → 82 % then answers like "3 + 1 = 11"), where 2e-4 held
 * 98.0 and 98.5 % at versions 8 and 13 (docs/demo.md). The ports sit beside `srpo up`'s defaults
 * (8100/8000/3000/3001), so a demo can run next to another topology.
 */
export const LLM_DEMO_DEFAULTS = {
  policy: 'smollm2-demo',
  lora: '{"r":16,"alpha":32,"targetModules":["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]}',
  lr: '2e-4',
  correction: 'tis',
  setsPerUpdate: 16,
  gatewayPort: 8110,
  servePort: 8010,
  learnerPort: 3010,
  materializerPort: 3011,
  seconds: 1800,
  heldOut: 200,
  evalEverySeconds: 240,
  until: 'gain' as UntilRule,
  variant: 'add-10' as WordProblemVariant,
  groupSize: 8,
  temperature: 0.8,
  concurrency: 2,
  readyTimeoutSeconds: 600,
  /** After SIGINT, how long `srpo up` has for its orderly stop before it is killed. */
  stopTimeoutSeconds: 90,
  /** Held-out requests in flight: serve batches them (the experiments of issue #39 used 32). */
  evalConcurrency: 32,
  maxConsecutiveFailures: 5,
  /** Pacing (VersionPacer): problems start at most this many updates ahead of the served version. */
  maxAhead: 1,
  paceTimeoutSeconds: 180,
} as const;

export const CORRECTIONS = ['none', 'tis', 'mis'] as const;

/** The flags as commander hands them over: strings, unparsed, so every error here names its flag. */
export interface LlmDemoFlags {
  attach?: boolean;
  gateway?: string;
  serveUrl?: string;
  learnerUrl?: string;
  policy?: string;
  model?: string;
  lr?: string;
  correction?: string;
  setsPerUpdate?: string;
  port?: string;
  servePort?: string;
  learnerPort?: string;
  materializerPort?: string;
  seconds?: string;
  heldOut?: string;
  evalEvery?: string;
  until?: string;
  verifier?: boolean;
  variant?: string;
  groupSize?: string;
  temperature?: string;
  concurrency?: string;
  readyTimeout?: string;
  maxAhead?: string;
}

/** How `srpo up` is started: one child process, its output in `logFile`. */
export interface TopologyPlan {
  /** Arguments after `node`: bin/srpo.js up ... */
  args: string[];
  env: Record<string, string>;
  logFile: string;
  readyTimeoutMs: number;
  stopTimeoutMs: number;
  broker: BrokerPlan;
  model: string;
  lr: string;
  correction: (typeof CORRECTIONS)[number];
  setsPerUpdate: number;
  topicPrefix: string;
  ports: { gateway: number; serve: number; learner: number; materializer: number };
}

export interface LlmDemoConfig {
  runId: string;
  runDir: string;
  mode: 'run' | 'attach';
  policy: string;
  /** The gateway's OpenAI base URL (`…/v1`): recorded play. */
  gatewayUrl: string;
  /** srpo serve's OpenAI base URL (`…/v1`): greedy evaluation, not recorded. */
  serveUrl: string;
  /** The learner's HTTP API, for the update count; unset in attach mode without --learner-url. */
  learnerUrl?: string;
  /** SRPO_AGENT_KEY: the bearer key of a gateway with keys. */
  apiKey: string;
  /** Unset in attach mode. */
  topology?: TopologyPlan;
  run: LlmDemoRunOptions;
}

function integer(flag: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isSafeInteger(n) || n < min || n > max)
    throw new ValidationError(flag, `must be an integer in [${min}, ${max}], got "${raw}"`);
  return n;
}

function oneOf<T extends string>(flag: string, raw: string | undefined, allowed: readonly T[], fallback: T): T {
  if (raw === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(raw)) throw new ValidationError(flag, `must be one of ${allowed.join(', ')}, got "${raw}"`);
  return raw as T;
}

function httpUrl(flag: string, raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ValidationError(flag, `must be an http(s) URL, got "${raw}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ValidationError(flag, `must be an http(s) URL, got "${raw}"`);
  return raw.replace(/\/$/, '');
}

/** Flags that configure the topology `srpo demo --llm` starts: meaningless with --attach. */
const TOPOLOGY_FLAGS: readonly (keyof LlmDemoFlags)[] = ['model', 'lr', 'correction', 'port', 'servePort', 'learnerPort', 'materializerPort', 'readyTimeout'];
const flagName = (key: string) => `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

/**
 * The demo's configuration from its flags and the environment, validated before anything starts;
 * each error names the flag (or variable) at fault. Variables it reads: `KAFKA_BROKERS`,
 * `SRPO_KAFKA_PORT` / `SRPO_KAFKA_DIR` (the local broker), `SRPO_SMOLLM2_DIR` / `SRPO_CACHE_DIR`
 * (the model's default place), `SRPO_CORRECTION` / `SRPO_SETS_PER_UPDATE` (defaults of their
 * flags; sets per update also paces the agents), `SRPO_TOPIC_PREFIX` (default `srpo.demo-llm.<run id>.`), `SRPO_DEMO_LLM_DIR` (the run
 * directory, default `.srpo/demo-llm/<run id>`), `SRPO_AGENT_KEY`. Every other variable passes to
 * `srpo up` and its children unchanged.
 */
export function loadLlmDemoConfig(
  flags: LlmDemoFlags,
  env: Readonly<Record<string, string | undefined>> = process.env,
  cwd: string = process.cwd(),
  runId: string = `${new Date().toISOString().slice(0, 19).replace(/[-:T]/g, '')}-${Math.random().toString(36).slice(2, 6)}`,
): LlmDemoConfig {
  const r = new EnvReader(env);
  const runDir = path.resolve(cwd, r.str('SRPO_DEMO_LLM_DIR', path.join(repoRoot(), '.srpo', 'demo-llm', runId)));
  // The learner's sets per update: srpo up's setting, and what pacing counts problems by (also with --attach).
  const setsPerUpdate = integer('--sets-per-update', flags.setsPerUpdate ?? r.optionalStr('SRPO_SETS_PER_UPDATE'), LLM_DEMO_DEFAULTS.setsPerUpdate, 1, 100_000);
  const common = { runId, runDir, apiKey: r.str('SRPO_AGENT_KEY', 'unused'), run: runOptions(flags, runId, setsPerUpdate) };
  if (flags.attach === true) return { ...common, ...attachTargets(flags) };
  for (const flag of ['gateway', 'serveUrl', 'learnerUrl'] as const)
    if (flags[flag] !== undefined) throw new ValidationError(flagName(flag), 'only with --attach (without it, the demo starts its own topology)');
  const policy = checkPolicy(flags.policy ?? LLM_DEMO_DEFAULTS.policy);
  const topology = planTopology(flags, r, env, cwd, { runId, runDir, policy, setsPerUpdate });
  return {
    ...common,
    mode: 'run',
    policy,
    gatewayUrl: `http://127.0.0.1:${topology.ports.gateway}/v1`,
    serveUrl: `http://127.0.0.1:${topology.ports.serve}/v1`,
    learnerUrl: `http://127.0.0.1:${topology.ports.learner}`,
    topology,
  };
}

/** What the agents play and when they evaluate. */
function runOptions(flags: LlmDemoFlags, runId: string, setsPerUpdate: number): LlmDemoRunOptions {
  const d = LLM_DEMO_DEFAULTS;
  const groupSize = integer('--group-size', flags.groupSize, d.groupSize, 2, WORD_PROBLEM_MAX_GROUP_SIZE);
  const verifier = flags.verifier === true;
  const maxAhead = flags.maxAhead === 'off' ? undefined : integer('--max-ahead', flags.maxAhead, d.maxAhead, 0, 1000);
  const temperature = flags.temperature === undefined ? d.temperature : Number(flags.temperature);
  // The gateway refuses temperature 0: a greedy answer has no sampling distribution to train on.
  if (!(temperature > 0 && temperature <= 2)) throw new ValidationError('--temperature', `must be in (0, 2], got "${flags.temperature}"`);
  return {
    variant: oneOf('--variant', flags.variant, Object.keys(WORD_PROBLEM_VARIANTS) as WordProblemVariant[], d.variant),
    heldOut: integer('--held-out', flags.heldOut, d.heldOut, 1, WORD_PROBLEM_MAX_HELDOUT_SIZE),
    play: {
      ...DEFAULT_WORD_PROBLEM_PLAY,
      runId,
      // A group of one has no advantage to learn from.
      groupSize,
      temperature,
      verifier,
    },
    concurrency: integer('--concurrency', flags.concurrency, d.concurrency, 1, 64),
    evalEveryMs: integer('--eval-every', flags.evalEvery, d.evalEverySeconds, 5, 86_400) * 1000,
    limitMs: integer('--seconds', flags.seconds, d.seconds, 10, 86_400) * 1000,
    until: oneOf('--until', flags.until, ['gain', 'time'] as const, d.until),
    evalConcurrency: d.evalConcurrency,
    maxConsecutiveFailures: d.maxConsecutiveFailures,
    // Each episode gives one set per step: the solver's, and the verifier's with --verifier.
    ...(maxAhead === undefined
      ? {}
      : { pacing: { tasksPerUpdate: setsPerUpdate / (groupSize * (verifier ? 2 : 1)), maxAhead, timeoutMs: d.paceTimeoutSeconds * 1000, pollMs: 500 } }),
  };
}

/** --attach: the URLs of a running topology, and no flag of the one the demo would start. */
function attachTargets(flags: LlmDemoFlags): Pick<LlmDemoConfig, 'mode' | 'policy' | 'gatewayUrl' | 'serveUrl' | 'learnerUrl'> {
  for (const key of TOPOLOGY_FLAGS)
    if (flags[key] !== undefined) throw new ValidationError(flagName(key), 'configures the topology that --attach does not start; leave it out');
  const need = (flag: string, value: string | undefined) => {
    if (value === undefined) throw new ValidationError(flag, 'is required with --attach');
    return value;
  };
  return {
    mode: 'attach',
    policy: checkPolicy(need('--policy', flags.policy)),
    gatewayUrl: httpUrl('--gateway', need('--gateway', flags.gateway)),
    serveUrl: httpUrl('--serve-url', need('--serve-url', flags.serveUrl)),
    ...(flags.learnerUrl === undefined ? {} : { learnerUrl: httpUrl('--learner-url', flags.learnerUrl) }),
  };
}

function checkPolicy(policy: string): string {
  if (!/^[A-Za-z0-9._-]{1,200}$/.test(policy) || policy === '.' || policy === '..')
    throw new ValidationError('--policy', `must match [A-Za-z0-9._-]{1,200} (it names checkpoint directories), got "${policy}"`);
  return policy;
}

/** The model directory: --model, else where the set-up makes SmolLM2-135M-Instruct. */
function modelDir(flags: LlmDemoFlags, env: Readonly<Record<string, string | undefined>>, cwd: string): string {
  if (flags.model === undefined) {
    const dir = smollm2ModelDir(env);
    const problem = smollm2DirProblem(dir);
    if (problem !== undefined)
      throw new ValidationError('--model', `SmolLM2-135M-Instruct is not ready (${problem}); ${SMOLLM2_MAKE_COMMAND} (or npm run setup) makes it`);
    return dir;
  }
  const dir = path.resolve(cwd, flags.model);
  if (!fs.existsSync(path.join(dir, 'config.json'))) throw new ValidationError('--model', `${dir} is not a Hugging Face model directory (no config.json)`);
  return dir;
}

/** The four ports, each its own. */
function topologyPorts(flags: LlmDemoFlags): TopologyPlan['ports'] {
  const d = LLM_DEMO_DEFAULTS;
  const ports: [string, number][] = [
    ['--port', integer('--port', flags.port, d.gatewayPort, 1, 65535)],
    ['--serve-port', integer('--serve-port', flags.servePort, d.servePort, 1, 65535)],
    ['--learner-port', integer('--learner-port', flags.learnerPort, d.learnerPort, 1, 65535)],
    ['--materializer-port', integer('--materializer-port', flags.materializerPort, d.materializerPort, 1, 65535)],
  ];
  for (const [flag, p] of ports) {
    const other = ports.find(([f, q]) => f !== flag && q === p);
    if (other) throw new ValidationError(flag, `${p} is also ${other[0]}'s port: each process needs its own`);
  }
  return { gateway: ports[0][1], serve: ports[1][1], learner: ports[2][1], materializer: ports[3][1] };
}

/** srpo up's environment: the caller's, the learner settings, and the run's own topics, consumer group and local state. */
function topologyEnv(
  env: Readonly<Record<string, string | undefined>>,
  r: EnvReader,
  s: { correction: string; setsPerUpdate: number; topicPrefix: string; runDir: string },
): Record<string, string> {
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
  return Object.assign(childEnv, {
    SRPO_CORRECTION: s.correction,
    SRPO_SETS_PER_UPDATE: String(s.setsPerUpdate),
    // Fresh topics, consumer groups and local state per run: runs never mix, on a broker shared
    // with other topologies included.
    SRPO_TOPIC_PREFIX: s.topicPrefix,
    SRPO_CONSUMER_GROUP: r.str('SRPO_CONSUMER_GROUP', `${s.topicPrefix}learner`),
    SRPO_STATE_DIR: r.str('SRPO_STATE_DIR', path.join(s.runDir, 'state')),
    SRPO_RAW_PARTITIONS: r.str('SRPO_RAW_PARTITIONS', '2'),
    SRPO_DERIVED_PARTITIONS: r.str('SRPO_DERIVED_PARTITIONS', '1'),
  });
}

function planTopology(
  flags: LlmDemoFlags,
  r: EnvReader,
  env: Readonly<Record<string, string | undefined>>,
  cwd: string,
  run: { runId: string; runDir: string; policy: string; setsPerUpdate: number },
): TopologyPlan {
  const model = modelDir(flags, env, cwd);
  const lr = (flags.lr ?? LLM_DEMO_DEFAULTS.lr).trim();
  if (!/^[0-9.eE+-]+$/.test(lr) || !(Number(lr) > 0 && Number(lr) < 1))
    throw new ValidationError('--lr', `must be a number in (0, 1) such as 2e-4, got "${lr}"`);
  const correction = oneOf('--correction', flags.correction ?? r.optionalStr('SRPO_CORRECTION'), CORRECTIONS, 'tis');
  const setsPerUpdate = run.setsPerUpdate;
  const ports = topologyPorts(flags);
  const readyTimeout = integer('--ready-timeout', flags.readyTimeout, LLM_DEMO_DEFAULTS.readyTimeoutSeconds, 1, 86_400);
  const topicPrefix = r.str('SRPO_TOPIC_PREFIX', `srpo.demo-llm.${run.runId}.`);
  const localPort = r.int('SRPO_KAFKA_PORT', 9092, { min: 1, max: 65534 });
  const external = r.has('KAFKA_BROKERS');
  const ck = path.join(run.runDir, 'checkpoints');
  const sqlite = path.join(run.runDir, 'learner.sqlite');
  const portArgs = ['--port', ports.gateway, '--serve-port', ports.serve, '--learner-port', ports.learner, '--materializer-port', ports.materializer];
  return {
    args: [
      ...[path.join(repoRoot(), 'bin', 'srpo.js'), 'up', '--model', model, '--lora', LLM_DEMO_DEFAULTS.lora, '--lr', lr, '--policy', run.policy],
      ...portArgs.map(String),
      ...['--checkpoints', ck, '--sqlite', sqlite, '--ready-timeout', String(readyTimeout)],
    ],
    env: topologyEnv(env, r, { correction, setsPerUpdate, topicPrefix, runDir: run.runDir }),
    logFile: path.join(run.runDir, 'topology.log'),
    readyTimeoutMs: readyTimeout * 1000,
    stopTimeoutMs: LLM_DEMO_DEFAULTS.stopTimeoutSeconds * 1000,
    broker: {
      external,
      brokers: external
        ? r
            .str('KAFKA_BROKERS')
            .split(',')
            .map((b) => b.trim())
        : [`127.0.0.1:${localPort}`],
      local: { port: localPort, dir: r.optionalStr('SRPO_KAFKA_DIR') },
    },
    model,
    lr,
    correction,
    setsPerUpdate,
    topicPrefix,
    ports,
  };
}
