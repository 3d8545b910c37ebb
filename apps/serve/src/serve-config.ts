import * as fs from 'fs';
import * as path from 'path';
import { BACKEND_REQUESTS, BackendRequest, ConfigError, EnvReader, Logger, LogLevel, tfBackendSettings, type TfBackendSettings } from '@srpo/core';
import { KafkaConnectionOptions, readKafkaConnection, TopicCatalogOptions } from '@srpo/events';
import type { DecodeProducts } from '@srpo/hf';
import { ApiKeys, DEFAULT_KV_CACHE_TOKENS } from '@srpo/serving';

export interface ServeConfig {
  kafka: KafkaConnectionOptions;
  topics: TopicCatalogOptions;
  /** Policy ids served as OpenAI models (`model` in a request), following their versions on Kafka; empty: no broker is used. */
  policies: string[];
  /** A Hugging Face directory served on its own (`--model`), absolute; the base of runtime LoRA adapters. */
  modelDir?: string;
  /** The model id `modelDir` is served under (`--served-model-name`; default the directory's name). */
  modelName?: string;
  /** LoRA adapters held at once over the `--model` base; loading one more unloads the oldest. */
  maxLoras: number;
  /** Whether `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` answer (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING). */
  runtimeLora: boolean;
  /** Absolute; version 0 of each policy is read from it until a version is announced, and no announced checkpoint is loaded from outside it. */
  checkpointDir: string;
  /** Bearer keys and the models each may use (`SRPO_SERVE_API_KEYS`); open when unset. */
  keys: ApiKeys;
  /** The most tokens one choice may ask for (`max_tokens`); a request above it gets 400. */
  maxTokens: number;
  host: string;
  port: number;
  /** Choices forwarded together in one generation step. */
  maxBatchRows: number;
  /** Choices waiting beyond the batch before requests are refused with 503. */
  maxQueuedRows: number;
  /** KV-cache token slots of all rows together (GenerationEngineOptions.kvCacheTokens); 0: no cache. */
  kvCacheTokens: number;
  /** The product kernels of cached decode steps (GenerationEngineOptions.decodeProducts). */
  decodeProducts: DecodeProducts;
  /** Largest request body. */
  maxBodyBytes: number;
  startupTimeoutMs: number;
  backend: BackendRequest;
  /** How the backend loads: `SRPO_WEBGPU_FLAGS`, `SRPO_DAWN_NODE`, `SRPO_TF_CUDA`, `LD_LIBRARY_PATH` (tfBackendSettings). */
  backendSettings: TfBackendSettings;
  logLevel: LogLevel;
}

const POLICY_ID = /^[A-Za-z0-9._-]+$/;
const DECODE_PRODUCTS: readonly DecodeProducts[] = ['tensorflow', 'learner'];

/**
 * `srpo serve`'s configuration; the only module of the app that reads the environment.
 * Fails at boot with a `ConfigError` naming the variable.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | `KAFKA_*` | local broker | see readKafkaConnection |
 * | `SRPO_TOPIC_PREFIX` | `srpo.` | topic names (the policy-versions topic is followed) |
 * | `SRPO_CLIENT_ID` | `srpo-serve` | Kafka client id |
 * | `SRPO_SERVE_POLICIES` (`--policies`) | `actor`, none with `--model` | comma-separated policy ids to serve; each is a `model` |
 * | `SRPO_SERVE_MODEL_DIR` (`--model`) | unset | a Hugging Face directory served on its own, with no broker or learner |
 * | `SRPO_SERVE_MODEL_NAME` (`--served-model-name`) | the directory's name | its model id |
 * | `SRPO_SERVE_MAX_LORAS` (`--max-loras`) | 8 | LoRA adapters held at once over the `--model` base |
 * | `SRPO_SERVE_RUNTIME_LORA` | true | `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` answer |
 * | `SRPO_CHECKPOINT_DIR` | `.srpo/checkpoints` | the learners' checkpoint root; a PolicyVersion naming a checkpoint outside it (after `..` and symlinks) is refused |
 * | `SRPO_SERVE_API_KEYS` | unset | JSON `{"<key>": ["policy", ...]}` (`*`: every model, and the LoRA load/unload routes), as the gateway's; unset: no authentication (warned at boot when the host is not loopback) |
 * | `SRPO_SERVE_MAX_TOKENS` (`--max-tokens`) | 4096 | most tokens one choice may ask for (`max_tokens`); above it: 400 naming `max_tokens` |
 * | `SRPO_SERVE_HOST` / `SRPO_SERVE_PORT` | `127.0.0.1` / 8000 | where the API listens |
 * | `SRPO_SERVE_MAX_BATCH` | 64 | choices generated together per step |
 * | `SRPO_SERVE_MAX_QUEUE` | 1024 | choices waiting before requests get 503 |
 * | `SRPO_SERVE_KV_CACHE_TOKENS` (`--kv-cache-tokens`) | 32768 | KV-cache token slots of all rows together (rows past it wait or are preempted; a choice whose prompt + max_tokens exceeds it gets 400); 0 turns the cache off |
 * | `SRPO_SERVE_DECODE_PRODUCTS` (`--decode-products`) | learner | product kernels of cached decode steps: `tensorflow` or `learner` |
 * | `SRPO_SERVE_MAX_BODY_BYTES` | 4194304 | largest request body |
 * | `SRPO_SERVE_STARTUP_TIMEOUT_MS` | 120000 | longest wait for version 0 of every policy |
 * | `SRPO_BACKEND` | `auto` | TensorFlow.js backend |
 * | `SRPO_WEBGPU_FLAGS` | | JSON object of tfjs-backend-webgpu flags (tuning runs) |
 * | `SRPO_DAWN_NODE` | | path of dawn.node, for a bundle that carries it |
 * | `SRPO_TF_CUDA` | | `11` or `12`: the CUDA generation tfjs-node-gpu's libtensorflow needs, where its files do not tell |
 * | `SRPO_LOG_LEVEL` | `info` | `debug`, `info`, `warn`, `error` |
 */
export function loadServeConfig(env: Readonly<Record<string, string | undefined>> = process.env, cwd: string = process.cwd()): ServeConfig {
  const r = new EnvReader(env);
  const modelDirRaw = r.optionalStr('SRPO_SERVE_MODEL_DIR');
  const modelDir = modelDirRaw === undefined ? undefined : path.resolve(cwd, modelDirRaw);
  if (modelDir !== undefined && !fs.existsSync(path.join(modelDir, 'config.json')))
    throw new ConfigError('SRPO_SERVE_MODEL_DIR', `${modelDir} is not a Hugging Face model directory (no config.json)`);
  const modelName = modelDir === undefined ? undefined : r.str('SRPO_SERVE_MODEL_NAME', path.basename(modelDir));
  if (modelName !== undefined && (modelName.trim() === '' || /[\s]/.test(modelName)))
    throw new ConfigError('SRPO_SERVE_MODEL_NAME', `"${modelName}" must be a non-empty name without spaces`);
  // With a model directory and no policies named, nothing is followed: no broker is needed.
  const policies = r.list('SRPO_SERVE_POLICIES', modelDir === undefined ? ['actor'] : []);
  if (policies.length === 0 && modelDir === undefined) throw new ConfigError('SRPO_SERVE_POLICIES', 'lists no policy (and no SRPO_SERVE_MODEL_DIR is set)');
  if (modelName !== undefined && policies.includes(modelName))
    throw new ConfigError('SRPO_SERVE_MODEL_NAME', `"${modelName}" is also a served policy id; give the model another name`);
  for (const p of policies) {
    if (!POLICY_ID.test(p) || p === '.' || p === '..') throw new ConfigError('SRPO_SERVE_POLICIES', `policy id "${p}" must match [A-Za-z0-9._-]+`);
  }
  if (new Set(policies).size !== policies.length) throw new ConfigError('SRPO_SERVE_POLICIES', 'lists a policy twice');
  const keysJson = r.optionalStr('SRPO_SERVE_API_KEYS');
  const keys = keysJson === undefined ? ApiKeys.open() : ConfigError.guard('SRPO_SERVE_API_KEYS', () => ApiKeys.parse(keysJson, 'SRPO_SERVE_API_KEYS'));
  return {
    kafka: readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-serve')),
    topics: { prefix: r.str('SRPO_TOPIC_PREFIX', 'srpo.') },
    policies,
    ...(modelDir !== undefined ? { modelDir, modelName } : {}),
    maxLoras: r.int('SRPO_SERVE_MAX_LORAS', 8, { min: 1, max: 1024 }),
    runtimeLora: r.bool('SRPO_SERVE_RUNTIME_LORA', true),
    checkpointDir: path.resolve(cwd, r.str('SRPO_CHECKPOINT_DIR', '.srpo/checkpoints')),
    keys,
    maxTokens: r.int('SRPO_SERVE_MAX_TOKENS', 4096, { min: 1, max: 1_000_000 }),
    host: r.str('SRPO_SERVE_HOST', '127.0.0.1'),
    port: r.int('SRPO_SERVE_PORT', 8000, { min: 0, max: 65535 }),
    maxBatchRows: r.int('SRPO_SERVE_MAX_BATCH', 64, { min: 1, max: 4096 }),
    maxQueuedRows: r.int('SRPO_SERVE_MAX_QUEUE', 1024, { min: 1, max: 1_000_000 }),
    // Bounded so a typo cannot promise more memory than any machine has (2^24 slots: 770 GB on SmolLM2-135M).
    kvCacheTokens: r.int('SRPO_SERVE_KV_CACHE_TOKENS', DEFAULT_KV_CACHE_TOKENS, { min: 0, max: 2 ** 24 }),
    decodeProducts: r.oneOf('SRPO_SERVE_DECODE_PRODUCTS', DECODE_PRODUCTS, 'learner'),
    maxBodyBytes: r.int('SRPO_SERVE_MAX_BODY_BYTES', 4 * 1024 * 1024, { min: 1024 }),
    startupTimeoutMs: r.int('SRPO_SERVE_STARTUP_TIMEOUT_MS', 120_000, { min: 0 }),
    backend: r.oneOf('SRPO_BACKEND', BACKEND_REQUESTS, 'auto'),
    backendSettings: tfBackendSettings(r),
    logLevel: r.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info'),
  };
}

export function applyServeConfig(config: ServeConfig): void {
  Logger.configure({ level: config.logLevel });
}
