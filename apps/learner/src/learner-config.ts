import * as fs from 'fs';
import * as net from 'net';
import * as path from 'path';
import {
  BACKEND_REQUESTS,
  BackendRequest,
  ConfigError,
  EnvReader,
  errorMessage,
  Logger,
  LogLevel,
  repoRoot,
  tfBackendSettings,
  type TfBackendSettings,
  isLoopbackHost,
} from '@srpo/core';
import { KafkaConnectionOptions, readKafkaConnection, readSchemaRegistry, SchemaRegistryClient, TopicCatalogOptions } from '@srpo/events';
import { resolveTransformerConfig, type TransformerConfig } from '@srpo/policy';
import { readHfConfig, resolveLoraConfig, type LoraConfig } from '@srpo/hf';
import {
  BEHAVIOUR_CORRECTIONS,
  EVENT_REDUCTIONS,
  OBJECTIVES,
  resolveCorrectionConfig,
  resolveObjectiveConfig,
  type CorrectionConfig,
  type ObjectiveConfig,
} from '@srpo/srpo';
import { readStore, type StoreConfig } from '@srpo/store';
import { DEFAULT_MODEL, type CheckpointRetention, type UpdateBoundary } from '@srpo/trainer';

/** Step boundaries of an update at which {@link LearnerConfig.crashAt} can kill the process. */
export type CrashPoint = UpdateBoundary;
export const CRASH_POINTS: readonly CrashPoint[] = ['after-step', 'after-checkpoint', 'after-db', 'after-publish'];

export interface LearnerConfig {
  policyId: string;
  /** Agent roles recorded for the policy when it is first registered. */
  policyRoles: string[];
  store: StoreConfig;
  /** Absolute; checkpoints are `<dir>/<policyId>/v<version>/`. */
  checkpointDir: string;
  /** Which checkpoint directories survive pruning after each committed update. */
  checkpointRetention: CheckpointRetention;
  setsPerUpdate: number;
  maxPolicyLag: number;
  epochs: number;
  lr: number;
  maxGradNorm: number;
  /** Largest padded forward pass (positions); above it an update accumulates over micro-batches. 0: one pass. */
  microBatchTokens: number;
  seed: number;
  objective: ObjectiveConfig;
  /** Engine/learner mismatch correction and KL penalty (docs/objective.md, section 7). */
  correction: CorrectionConfig;
  /** Shape of version 0 (a restored checkpoint carries its own); unused when `modelDir` is set. */
  model: TransformerConfig;
  /** A Hugging Face model directory (Llama/Qwen2/Mistral) as version 0, instead of a seeded transformer. */
  modelDir?: string;
  /** With `modelDir`: train a LoRA adapter (seeded by SRPO_SEED) on the frozen base instead of the full weights. */
  lora?: LoraConfig;
  backend: BackendRequest;
  /** How the backend loads: `SRPO_WEBGPU_FLAGS`, `SRPO_DAWN_NODE`, `SRPO_TF_CUDA`, `LD_LIBRARY_PATH` (tfBackendSettings). */
  backendSettings: TfBackendSettings;
  /** Address the HTTP API listens on: loopback unless chosen otherwise. */
  httpHost: string;
  httpPort: number;
  /** Bearer token for state-changing endpoints (unset disables them); when set, reads require it (or the read token) too. */
  apiToken?: string;
  /** When set, read-only endpoints require it (or the write token). */
  apiReadToken?: string;
  kafka: KafkaConnectionOptions;
  /**
   * Set when agents or the materializer write Confluent-framed events: the learner then loads
   * writer schemas by id, including those of the AgentOutput bytes nested in each set.
   */
  schemaRegistry?: SchemaRegistryClient;
  topics: TopicCatalogOptions;
  consumerGroupId: string;
  /** Consumer session timeout: how long a crashed learner holds its partitions. */
  sessionTimeoutMs: number;
  /** Recorded with every update. */
  codeVersion: string;
  /** Test-only fault injection; never set in production. */
  crashAt?: CrashPoint;
  /** Test-only: each piece of an update (micro-batch, pass, epoch) blocks the event loop this much longer. */
  slowMicroBatchMs: number;
  logLevel: LogLevel;
  /** Settings that are allowed but likely wrong (a learning rate far above guidance); logged at boot by {@link applyLearnerConfig}. */
  warnings: string[];
}

/**
 * Learning-rate guidance by what the learner trains (Adam, constant rate). The defaults are used
 * when `SRPO_LR` is unset; above `warnAbove` the learner starts but logs a warning.
 *
 * - the project transformer, trained from scratch: 3e-4;
 * - a LoRA adapter on a Hugging Face base: 1e-4 (RL fine-tuning with LoRA commonly uses
 *   5e-5..2e-4; SmolLM2-135M-Instruct trained stably at these rates, 1–3 s per update);
 * - the full weights of a Hugging Face model: 1e-6 (RL on pretrained weights: 1e-7..1e-5;
 *   5e-4 destroyed SmolLM2-135M-Instruct in four updates, its k3 KL going from 0 to 2.2e6).
 */
export const LR_GUIDANCE = {
  scratch: { default: 3e-4, warnAbove: Infinity },
  lora: { default: 1e-4, warnAbove: 1e-3 },
  full: { default: 1e-6, warnAbove: 1e-5 },
} as const;

/**
 * Default SRPO_MICRO_BATCH_TOKENS for a Hugging Face model (LoRA or full weights). A one-pass
 * update holds every activation and several `[positions, vocabulary]` tensors at once: on
 * SmolLM2-135M (vocabulary 49,152) one LoRA pass of 8 × 256 positions peaked at 9.2 GB RSS
 * (bench/learner/hf/smollm2.ts), and a LoRA learner behind `srpo up`, given 16 sets of about 180
 * positions, was killed by the kernel at 19.5 GB on a 24 GB machine (2026-12-05). Micro-batches of
 * 1,024 positions bound that, and let heartbeats leave between them; they cost the recomputed
 * activations (about 35 % more time for full weights, docs/learner.md). The project's own
 * transformer keeps one pass (0).
 */
export const HF_MICRO_BATCH_TOKENS = 1024;

/**
 * Default consumer session timeouts. The update runs inside the consumer's batch handler and
 * native TensorFlow blocks the event loop while it computes; the update yields between its
 * pieces (each micro-batch of SRPO_MICRO_BATCH_TOKENS, each pass, each epoch), and heartbeats
 * leave there (kafkajs and @platformatic/kafka alike), so the session timeout must exceed the
 * slowest piece, not the whole update. Rule: at least twice the slowest piece. Without
 * micro-batches (SRPO_MICRO_BATCH_TOKENS=0, the default) one piece is the whole forward and
 * backward pass: full-weight updates of SmolLM2-135M took 15–24 s on a 2-vCPU machine (the
 * demo's 10 s timeout crashed the consumer), hence 120 s for full weights in one pass; with
 * micro-batches, or for LoRA (1–3 s per update) and the project transformer (well under 1 s): 30 s.
 */
export const SESSION_TIMEOUT_DEFAULTS = { full: 120_000, other: 30_000 } as const;

const POLICY_ID = /^[A-Za-z0-9._-]+$/;
const MIN_TOKEN_LENGTH = 16;
/** A DNS name (`localhost`, `learner.internal`); IP literals are checked by `net.isIP`. */
const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/**
 * The learner's configuration: the only place in the learner that reads the
 * environment. Validated completely at boot; a bad value fails with a
 * `ConfigError` naming the variable.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | `SRPO_POLICY_ID` | required | policy this learner trains; `[A-Za-z0-9._-]+` (it names checkpoint directories) |
 * | `SRPO_POLICY_ROLES` | the policy id | comma-separated agent roles recorded when the policy is first registered |
 * | `SRPO_DATABASE_URL` | unset | `postgres://…` or `postgresql://…` → PostgreSQL; unset → SQLite |
 * | `SRPO_DATABASE_SCHEMA` | server default | PostgreSQL schema holding the tables (must exist) |
 * | `SRPO_SQLITE_PATH` | `.srpo/learner.sqlite` | SQLite file when no database URL is set |
 * | `SRPO_CHECKPOINT_DIR` | `.srpo/checkpoints` | checkpoint root; one directory per version |
 * | `SRPO_CHECKPOINT_KEEP_LAST` | 20 | after each committed update (and at start), delete checkpoints except the newest N committed versions, version 0 and the anchors below; 0 keeps every checkpoint (no pruning). 20 leaves agents that are still loading a recent announced version, and verify/replay of recent updates, a checkpoint to start from |
 * | `SRPO_CHECKPOINT_KEEP_EVERY` | 100 | also keep every version divisible by M as an anchor: verify and replay rebuild a pruned version from the nearest earlier kept checkpoint by re-applying at most M − 1 recorded updates; 0 keeps no anchors but version 0 (rebuilds then start at version 0). Ignored when `SRPO_CHECKPOINT_KEEP_LAST=0` |
 * | `SRPO_SETS_PER_UPDATE` | 16 | active sets the consumer gathers for one update |
 * | `SRPO_MAX_POLICY_LAG` | 4 | a group with a member older than current version − lag is skipped as stale |
 * | `SRPO_EPOCHS` | 1 | optimizer epochs per update over the same mini-batch |
 * | `SRPO_LR` | by model kind | Adam learning rate (constant): 3e-4 for the project transformer, 1e-4 for LoRA, 1e-6 for a Hugging Face model's full weights ({@link LR_GUIDANCE}); above 1e-3 (LoRA) or 1e-5 (full weights) the learner warns at boot |
 * | `SRPO_MAX_GRAD_NORM` | 1.0 | global gradient-norm clip; 0 disables |
 * | `SRPO_SEED` | 0 | seed of the initial (version 0) weights |
 * | `SRPO_OBJECTIVE` | `srpo` | `srpo`, `gspo`, `grpo-token` or `srpo-length-norm` (the project's own variant; docs/objective.md) |
 * | `SRPO_EVENT_REDUCTION` | `sqrt` | c(K) of the set ratio: `sqrt`, `sum` or `mean` |
 * | `SRPO_CLIP_LOW` | 0.2 | ε_low, in [0, 1] |
 * | `SRPO_CLIP_HIGH` | 0.2 | ε_high, >= 0 |
 * | `SRPO_CORRECTION` | `none` | engine/learner mismatch correction: `none` (the set ratio uses the engine's recorded log-probs), `tis` (recompute the proximal log-probs at the update's starting weights, use them in the ratio, weight each set by min(exp(m_S), cap)) or `mis` (the same, sets with \|m_S\| > bound dropped); docs/objective.md section 7 |
 * | `SRPO_CORRECTION_CAP` | 2 | C of `tis`: the largest set weight, >= 1 |
 * | `SRPO_CORRECTION_BOUND` | 0.693147 (ln 2) | B of `mis`: the largest \|mean token log-ratio\| of a kept set, > 0 |
 * | `SRPO_KL_COEF` | 0 | β of the KL penalty β·mean k3(π_ref ‖ π_θ) added to the loss, >= 0; > 0 needs `SRPO_LORA` (the reference is the base model without the adapter) |
 * | `SRPO_MODEL_CONFIG` | `{"vocabSize":256,"dModel":64,"nLayers":2,"nHeads":4,"maxSeqLen":128}` | JSON transformer shape of version 0; must match the agents' tokenizer |
 * | `SRPO_MICRO_BATCH_TOKENS` | 0; 1024 for a Hugging Face model | largest padded forward pass in positions (sequences × longest); an update above it runs in micro-batches with gradient accumulation and activation recomputation: one optimizer step, the same loss and diagnostics; 0 = one pass. Recorded with each update so verify and replay recompute it the same way. The consumer heartbeats between micro-batches, so with a budget the session timeout covers one micro-batch, not the update |
 * | `SRPO_LORA` | unset | with `SRPO_MODEL_DIR`: JSON LoRA settings, e.g. `{"r":8,"alpha":16,"dropout":0,"targetModules":["q_proj","v_proj"]}` (missing fields take these defaults); the policy then trains an adapter on the frozen base, checkpoints hold the adapter only |
 * | `SRPO_MODEL_DIR` | unset | a Hugging Face model directory (config.json, safetensors, tokenizer.json) as version 0 instead; its config is checked at boot; exclusive with `SRPO_MODEL_CONFIG` |
 * | `SRPO_BACKEND` | `auto` | `auto`, `tensorflow-gpu`, `tensorflow` or `cpu`; a forced backend that fails is an error |
 * | `SRPO_WEBGPU_FLAGS` | | JSON object of tfjs-backend-webgpu flags (tuning runs) |
 * | `SRPO_DAWN_NODE` | | path of dawn.node, for a bundle that carries it |
 * | `SRPO_TF_CUDA` | | `11` or `12`: the CUDA generation tfjs-node-gpu's libtensorflow needs, where its files do not tell |
 * | `SRPO_HTTP_HOST` | `127.0.0.1` | address the HTTP API and dashboard listen on: an IP address (`0.0.0.0` or `::` for every interface) or a host name; anything but loopback without a token logs a warning at boot |
 * | `SRPO_HTTP_PORT` | 3000 | HTTP API port |
 * | `SRPO_API_TOKEN` | unset | bearer token (>= 16 chars) for `POST /consumption/*`, and, once set, for every read endpoint too; unset: the state-changing endpoints answer 403 |
 * | `SRPO_API_READ_TOKEN` | unset | when set (>= 16 chars), read endpoints (`/metrics`, `/policies`, `/updates`, `/group-stats`, `/sets`, verify) require it or the write token |
 * | `SRPO_TOPIC_PREFIX` | `srpo.` | topic name prefix |
 * | `SRPO_CONSUMER_GROUP` | `srpo-learner.<policy id>` | Kafka consumer group of the learner |
 * | `SRPO_SESSION_TIMEOUT_MS` | by model kind | consumer session timeout: how long a crashed learner holds its partitions, and the longest one piece of an update (a micro-batch, a pass, an epoch's end) may block heartbeats; 120000 for a Hugging Face model's full weights without micro-batches, 30000 otherwise ({@link SESSION_TIMEOUT_DEFAULTS}); keep it above twice the slowest piece |
 * | `SRPO_CLIENT_ID` | `srpo-learner` | Kafka client id |
 * | `SRPO_CODE_VERSION` | `srpo-kafka@<package version>` | code version recorded with every update (CI sets the git commit) |
 * | `SRPO_LOG_LEVEL` | `info` | `debug`, `info`, `warn`, `error` |
 * | `SRPO_CRASH_AT` | unset | **test-only fault injection**: `after-step`, `after-checkpoint`, `after-db` or `after-publish` makes the process SIGKILL itself at that boundary of the next update |
 * | `SRPO_SLOW_MICRO_BATCH_MS` | 0 | **test-only fault injection**: each micro-batch, pass and epoch of an update blocks the event loop this much longer (a busy wait), as a slow micro-batch of a large model does |
 * | `KAFKA_*` | see `readKafkaConnection` | brokers, TLS, SASL |
 * | `SRPO_SCHEMA_REGISTRY_URL` (+ `_USER`, `_PASSWORD`) | unset | read Confluent-framed events (schemas by id from this registry); the learner's own events stay single-object |
 */
export function loadLearnerConfig(env: Readonly<Record<string, string | undefined>> = process.env, cwd: string = process.cwd()): LearnerConfig {
  const r = new EnvReader(env);
  const policyId = r.str('SRPO_POLICY_ID');
  if (!POLICY_ID.test(policyId) || policyId === '.' || policyId === '..' || policyId.length > 200) {
    throw new ConfigError('SRPO_POLICY_ID', `must match [A-Za-z0-9._-]+ (at most 200 characters; it names checkpoint directories), got "${policyId}"`);
  }
  const config: LearnerConfig = {
    policyId,
    policyRoles: r.list('SRPO_POLICY_ROLES', [policyId]),
    store: readStore(r, cwd),
    checkpointDir: path.resolve(cwd, r.str('SRPO_CHECKPOINT_DIR', '.srpo/checkpoints')),
    checkpointRetention: {
      keepLast: r.int('SRPO_CHECKPOINT_KEEP_LAST', 20, { min: 0, max: 1_000_000_000 }),
      keepEvery: r.int('SRPO_CHECKPOINT_KEEP_EVERY', 100, { min: 0, max: 1_000_000_000 }),
    },
    setsPerUpdate: r.int('SRPO_SETS_PER_UPDATE', 16, { min: 1, max: 100_000 }),
    maxPolicyLag: r.int('SRPO_MAX_POLICY_LAG', 4, { min: 0 }),
    epochs: r.int('SRPO_EPOCHS', 1, { min: 1, max: 1000 }),
    lr: 0,
    maxGradNorm: r.num('SRPO_MAX_GRAD_NORM', 1.0, { min: 0 }),
    microBatchTokens: 0,
    seed: r.int('SRPO_SEED', 0, { min: 0, max: Number.MAX_SAFE_INTEGER }),
    objective: readObjective(r),
    correction: readCorrection(r),
    model: readModel(r),
    modelDir: readModelDir(r, cwd),
    lora: readLora(r, cwd),
    backend: r.oneOf('SRPO_BACKEND', BACKEND_REQUESTS, 'auto'),
    backendSettings: tfBackendSettings(r),
    httpHost: readHttpHost(r),
    httpPort: r.int('SRPO_HTTP_PORT', 3000, { min: 0, max: 65535 }),
    apiToken: readToken(r, 'SRPO_API_TOKEN'),
    apiReadToken: readToken(r, 'SRPO_API_READ_TOKEN'),
    kafka: readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-learner')),
    schemaRegistry: readSchemaRegistry(r),
    topics: { prefix: r.str('SRPO_TOPIC_PREFIX', 'srpo.') },
    consumerGroupId: r.str('SRPO_CONSUMER_GROUP', `srpo-learner.${policyId}`),
    sessionTimeoutMs: 0,
    codeVersion: r.str('SRPO_CODE_VERSION', defaultCodeVersion()),
    crashAt: r.has('SRPO_CRASH_AT') ? r.oneOf('SRPO_CRASH_AT', CRASH_POINTS) : undefined,
    slowMicroBatchMs: r.int('SRPO_SLOW_MICRO_BATCH_MS', 0, { min: 0, max: 600_000 }),
    logLevel: r.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info'),
    warnings: [],
  };
  if (!isLoopbackHost(config.httpHost) && config.apiToken === undefined && config.apiReadToken === undefined)
    config.warnings.push(
      `SRPO_HTTP_HOST=${config.httpHost} accepts connections from other machines and neither SRPO_API_TOKEN nor SRPO_API_READ_TOKEN is set: ` +
        'the audit record, the metrics and verify are open to anyone who can reach the port',
    );
  const kind = config.modelDir === undefined ? 'scratch' : config.lora ? 'lora' : 'full';
  config.microBatchTokens = r.int('SRPO_MICRO_BATCH_TOKENS', kind === 'scratch' ? 0 : HF_MICRO_BATCH_TOKENS, { min: 0, max: 1_000_000_000 });
  const guidance = LR_GUIDANCE[kind];
  config.lr = r.num('SRPO_LR', guidance.default, { min: 0 });
  if (config.lr > guidance.warnAbove)
    config.warnings.push(
      `SRPO_LR=${config.lr} is far above the guidance for ${kind === 'lora' ? 'a LoRA adapter' : "a pretrained model's full weights"} ` +
        `(default ${guidance.default}, warning above ${guidance.warnAbove}); a pretrained model may be destroyed within a few updates`,
    );
  // Without micro-batches a full-weight step is one piece that blocks heartbeats for its whole length.
  const onePassFull = kind === 'full' && config.microBatchTokens === 0;
  config.sessionTimeoutMs = r.int('SRPO_SESSION_TIMEOUT_MS', onePassFull ? SESSION_TIMEOUT_DEFAULTS.full : SESSION_TIMEOUT_DEFAULTS.other, {
    min: 6_000,
    max: 300_000,
  });
  if (onePassFull && config.sessionTimeoutMs < SESSION_TIMEOUT_DEFAULTS.full)
    config.warnings.push(
      `SRPO_SESSION_TIMEOUT_MS=${config.sessionTimeoutMs} with a full-weight Hugging Face model in one pass: the forward and backward pass blocks heartbeats ` +
        'while it runs (15-24 s for a 135M model on 2 vCPUs); below twice that the broker evicts the learner mid-update. ' +
        'Set SRPO_MICRO_BATCH_TOKENS to heartbeat between micro-batches, or a longer timeout',
    );
  return config;
}

/** Applies the process-wide settings of a loaded config (log level) and logs its warnings. */
export function applyLearnerConfig(config: LearnerConfig): void {
  Logger.configure({ level: config.logLevel });
  const log = new Logger('learner-config');
  for (const warning of config.warnings) log.warn(warning);
}

/** SRPO_DATABASE_URL / SRPO_DATABASE_SCHEMA / SRPO_SQLITE_PATH; shared with the CLI so both find the same store. */

function readObjective(r: EnvReader): ObjectiveConfig {
  // Each variable is range-checked here so the error names it; resolveObjectiveConfig fills the rest.
  const partial = {
    objective: r.oneOf('SRPO_OBJECTIVE', OBJECTIVES, 'srpo'),
    eventReduction: r.oneOf('SRPO_EVENT_REDUCTION', EVENT_REDUCTIONS, 'sqrt'),
    clipLow: r.num('SRPO_CLIP_LOW', 0.2, { min: 0, max: 1 }),
    clipHigh: r.num('SRPO_CLIP_HIGH', 0.2, { min: 0 }),
    dualClip: r.bool('SRPO_DUAL_CLIP', true),
    clipRatioC: r.num('SRPO_CLIP_RATIO_C', 3),
  };
  if (!(partial.clipRatioC > 1)) throw new ConfigError('SRPO_CLIP_RATIO_C', `must be > 1 (the dual clip's c), got ${partial.clipRatioC}`);
  try {
    return resolveObjectiveConfig(partial, 'objective');
  } catch (e) {
    throw new ConfigError('SRPO_OBJECTIVE', errorMessage(e));
  }
}

function readCorrection(r: EnvReader): CorrectionConfig {
  // Each variable is range-checked here so the error names it.
  const correction = r.oneOf('SRPO_CORRECTION', BEHAVIOUR_CORRECTIONS, 'none');
  const cap = r.num('SRPO_CORRECTION_CAP', 2);
  if (!(cap >= 1)) throw new ConfigError('SRPO_CORRECTION_CAP', `must be >= 1 (the largest set weight), got ${cap}`);
  const bound = r.num('SRPO_CORRECTION_BOUND', Math.LN2);
  if (!(bound > 0)) throw new ConfigError('SRPO_CORRECTION_BOUND', `must be > 0 (the largest |mean log-ratio| of a kept set), got ${bound}`);
  const klCoef = r.num('SRPO_KL_COEF', 0, { min: 0 });
  if (klCoef > 0 && !r.has('SRPO_LORA')) {
    throw new ConfigError(
      'SRPO_KL_COEF',
      `${klCoef} needs SRPO_LORA: the KL reference is the base model without the adapter; full-weight policies have none (a second copy of the weights)`,
    );
  }
  try {
    return resolveCorrectionConfig({ correction, cap, bound, klCoef }, 'correction');
  } catch (e) {
    throw new ConfigError('SRPO_CORRECTION', errorMessage(e));
  }
}

/** Checked at boot (config.json read and resolved) so an unsupported model fails fast, naming the variable and the field. */
function readModelDir(r: EnvReader, cwd: string): string | undefined {
  const raw = r.optionalStr('SRPO_MODEL_DIR');
  if (raw === undefined) return undefined;
  const dir = path.resolve(cwd, raw);
  if (r.has('SRPO_MODEL_CONFIG'))
    throw new ConfigError('SRPO_MODEL_DIR', 'set either SRPO_MODEL_DIR (a Hugging Face directory) or SRPO_MODEL_CONFIG (the project transformer), not both');
  try {
    readHfConfig(dir);
  } catch (e) {
    throw new ConfigError('SRPO_MODEL_DIR', errorMessage(e));
  }
  return dir;
}

function readLora(r: EnvReader, cwd: string): LoraConfig | undefined {
  if (!r.has('SRPO_LORA')) return undefined;
  const dir = r.optionalStr('SRPO_MODEL_DIR');
  if (dir === undefined) throw new ConfigError('SRPO_LORA', 'needs SRPO_MODEL_DIR: adapters train on a Hugging Face base model');
  const parsed = r.json('SRPO_LORA');
  try {
    return resolveLoraConfig(parsed, readHfConfig(path.resolve(cwd, dir)).architecture, 'SRPO_LORA');
  } catch (e) {
    throw new ConfigError('SRPO_LORA', errorMessage(e));
  }
}

function readModel(r: EnvReader): TransformerConfig {
  const parsed = r.json('SRPO_MODEL_CONFIG');
  if (parsed === undefined) return { ...DEFAULT_MODEL };
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError('SRPO_MODEL_CONFIG', 'must be a JSON object such as {"vocabSize":256,"dModel":64,"nLayers":2,"nHeads":4,"maxSeqLen":128}');
  }
  try {
    return resolveTransformerConfig(parsed as TransformerConfig);
  } catch (e) {
    throw new ConfigError('SRPO_MODEL_CONFIG', errorMessage(e));
  }
}

function readHttpHost(r: EnvReader): string {
  const host = r.str('SRPO_HTTP_HOST', '127.0.0.1').trim();
  // Brackets are URL syntax, not an address: `[::1]` would fail in listen() after the whole boot.
  if (net.isIP(host) === 0 && !HOST_NAME.test(host))
    throw new ConfigError('SRPO_HTTP_HOST', `must be an IP address (127.0.0.1, ::1, 0.0.0.0) or a host name without brackets or port, got "${host}"`);
  return host;
}

function readToken(r: EnvReader, name: string): string | undefined {
  const token = r.optionalStr(name);
  if (token !== undefined && token.length < MIN_TOKEN_LENGTH) {
    throw new ConfigError(name, `must be at least ${MIN_TOKEN_LENGTH} characters long (got ${token.length})`);
  }
  return token;
}

function defaultCodeVersion(): string {
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(repoRoot(), 'package.json'), 'utf8')) as { name?: string; version?: string };
    if (pkg.name && pkg.version) return `${pkg.name}@${pkg.version}`;
  } catch {
    // Deployed without the repository around it: SRPO_CODE_VERSION should be set there.
  }
  return 'unknown';
}
