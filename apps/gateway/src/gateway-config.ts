import * as path from 'path';
import { ConfigError, EnvReader, Logger, LogLevel } from '@srpo/core';
import { KafkaConnectionOptions, readKafkaConnection, TopicCatalogOptions } from '@srpo/events';
import { readStore, type StoreConfig } from '@srpo/store';
import { ApiKeys, DEFAULT_SPOOL_MAX_BYTES, HfTextCodec, hfRetokenizer, redactCredentials, type Retokenizer } from '@srpo/serving';

export interface GatewayConfig {
  kafka: KafkaConnectionOptions;
  topics: TopicCatalogOptions;
  upstreamUrl: string;
  upstreamApiKey?: string;
  /** policy id → upstream model name; unset: names pass through. A Map: ids such as `__proto__` are ordinary keys. */
  models?: ReadonlyMap<string, string>;
  upstreamTokenIds: boolean;
  strict: boolean;
  keys: ApiKeys;
  retokenizer?: Retokenizer;
  tokenizerDir?: string;
  /** SRPO_GATEWAY_TOKEN_PROMPTS: later turns go upstream as token prompts rendered with this codec. */
  tokenPrompts?: HfTextCodec;
  /** The version recorded when the upstream reports none. */
  fixedVersion?: number;
  host: string;
  port: number;
  upstreamTimeoutMs: number;
  maxInFlight: number;
  /** Each key's average requests per second (completions and /v1/srpo/* writes); 0: no per-key limit. */
  keyRatePerS: number;
  keyBurst: number;
  /** Episode ownership: episodes remembered at most, and how long an idle one is remembered. */
  episodeOwnersMax: number;
  episodeOwnersTtlMs: number;
  maxBodyBytes: number;
  recordTimeoutMs: number;
  /** Absolute; where events wait when Kafka cannot take them. Unset: such requests fail with 503. */
  spoolDir?: string;
  /** Bytes the spool holds at most; past it, requests that would spool get 503. */
  spoolMaxBytes: number;
  tls?: { keyFile: string; certFile: string };
  /** SRPO_SEAL_CONTENT: the store whose content keys seal what is recorded; unset: recorded in the clear. */
  sealStore?: StoreConfig;
  logLevel: LogLevel;
}

/**
 * `srpo gateway`'s configuration; the only module of the app that reads the environment.
 * Fails at boot with a `ConfigError` naming the variable.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | `KAFKA_*` | local broker | see readKafkaConnection |
 * | `SRPO_TOPIC_PREFIX` | `srpo.` | topic names |
 * | `SRPO_CLIENT_ID` | `srpo-gateway` | Kafka client id |
 * | `SRPO_GATEWAY_UPSTREAM` | `http://127.0.0.1:8000/v1` | the upstream's OpenAI base URL (srpo serve, vLLM, SGLang) |
 * | `SRPO_GATEWAY_UPSTREAM_API_KEY` | unset | bearer key sent upstream (unset: the agent's own header is forwarded when the gateway has no keys) |
 * | `SRPO_GATEWAY_MODELS` | unset | `policyId=upstreamModel` pairs; only these models are served. Unset: a request's model is its policy id, passed through |
 * | `SRPO_GATEWAY_UPSTREAM_TOKEN_IDS` | true | ask for `return_token_ids` (srpo serve, vLLM ≥ 0.10.2); false for upstreams that refuse it |
 * | `SRPO_GATEWAY_TOKENIZER_DIR` | unset | a Hugging Face directory whose tokenizer re-tokenizes upstream text when no ids come back |
 * | `SRPO_GATEWAY_TOKEN_PROMPTS` | false | send a later turn of a conversation upstream as `/v1/completions` token ids, its parent's as sampled (no re-tokenization drift); needs `SRPO_GATEWAY_TOKENIZER_DIR` (the served model's tokenizer and chat template) and token ids from the upstream |
 * | `SRPO_GATEWAY_VERSION` | unset | the policy version to record when the upstream reports none |
 * | `SRPO_GATEWAY_STRICT` | true | refuse completions without episode fields (false: proxy them unrecorded) |
 * | `SRPO_GATEWAY_API_KEYS` | unset | JSON `{"<key>": ["policy", ...]}` (`*`: every policy; a key may be written `sha256:<hex>`); unset: no authentication |
 * | `SRPO_GATEWAY_HOST` / `SRPO_GATEWAY_PORT` | `127.0.0.1` / 8100 | where the gateway listens |
 * | `SRPO_GATEWAY_TLS_KEY` / `SRPO_GATEWAY_TLS_CERT` | unset | PEM files: serve HTTPS |
 * | `SRPO_GATEWAY_UPSTREAM_TIMEOUT_MS` | 120000 | longest wait for the upstream |
 * | `SRPO_GATEWAY_MAX_IN_FLIGHT` | 256 | completion requests in flight, all keys together; more get 429 |
 * | `SRPO_GATEWAY_KEY_RATE` | 100 | requests per second each API key may make on average (completions and `/v1/srpo/*` writes); more get 429 with `Retry-After`; 0: no per-key limit |
 * | `SRPO_GATEWAY_KEY_BURST` | 200 | requests a key may make at once after a pause |
 * | `SRPO_GATEWAY_EPISODE_OWNERS` | 100000 | episodes whose owning key the gateway remembers (least recently used forgotten first) |
 * | `SRPO_GATEWAY_EPISODE_TTL_MS` | 3600000 | an episode without a request this long is forgotten: the next key to use it owns it |
 * | `SRPO_GATEWAY_MAX_BODY_BYTES` | 4194304 | largest request body |
 * | `SRPO_GATEWAY_KAFKA_RETRIES` | 3 | the producer's retries before a write counts as failed (a few seconds against a dead broker) |
 * | `SRPO_GATEWAY_RECORD_TIMEOUT_MS` | 60000 | last-resort bound on one write; a write cut off by it may still land, so it sits above the retries' total |
 * | `SRPO_GATEWAY_SPOOL_DIR` | unset | spool events Kafka cannot take to this directory (fsynced) and replay them in order; unset: fail such requests with 503 |
 * | `SRPO_GATEWAY_SPOOL_MAX_BYTES` | 268435456 (256 MiB) | the spool's disk budget; a request whose events would go past it gets 503 (nothing is returned unrecorded) |
 * | `SRPO_SEAL_CONTENT` | false | seal every recorded output's tokens under its (subject, episode) content key, kept in the store below, so `srpo erase` can erase them (docs/erasure.md) |
 * | `SRPO_DATABASE_URL` / `SRPO_SQLITE_PATH` | `.srpo/learner.sqlite` | with `SRPO_SEAL_CONTENT`: the store that holds the content keys (the learner's) |
 * | `SRPO_LOG_LEVEL` | `info` | `debug`, `info`, `warn`, `error` |
 */
export function loadGatewayConfig(env: Readonly<Record<string, string | undefined>> = process.env, cwd: string = process.cwd()): GatewayConfig {
  const r = new EnvReader(env);
  const upstreamUrl = r.str('SRPO_GATEWAY_UPSTREAM', 'http://127.0.0.1:8000/v1');
  if (!/^https?:\/\/[^/]+/.test(upstreamUrl))
    throw new ConfigError('SRPO_GATEWAY_UPSTREAM', `must be an http(s) URL such as http://127.0.0.1:8000/v1, got "${redactCredentials(upstreamUrl)}"`);
  const keysJson = r.optionalStr('SRPO_GATEWAY_API_KEYS');
  let keys = ApiKeys.open();
  if (keysJson !== undefined) keys = ConfigError.guard('SRPO_GATEWAY_API_KEYS', () => ApiKeys.parse(keysJson, 'SRPO_GATEWAY_API_KEYS'));
  const tokenizerDir = r.optionalStr('SRPO_GATEWAY_TOKENIZER_DIR');
  const dir = tokenizerDir === undefined ? undefined : path.resolve(cwd, tokenizerDir);
  const retokenizer = dir === undefined ? undefined : ConfigError.guard('SRPO_GATEWAY_TOKENIZER_DIR', () => hfRetokenizer(dir));
  const keyFile = r.optionalStr('SRPO_GATEWAY_TLS_KEY');
  const certFile = r.optionalStr('SRPO_GATEWAY_TLS_CERT');
  if ((keyFile === undefined) !== (certFile === undefined))
    throw new ConfigError(
      keyFile === undefined ? 'SRPO_GATEWAY_TLS_KEY' : 'SRPO_GATEWAY_TLS_CERT',
      'set both SRPO_GATEWAY_TLS_KEY and SRPO_GATEWAY_TLS_CERT, or neither',
    );
  const version = r.optionalStr('SRPO_GATEWAY_VERSION');
  const upstreamTokenIds = r.bool('SRPO_GATEWAY_UPSTREAM_TOKEN_IDS', true);
  let tokenPrompts: HfTextCodec | undefined;
  if (r.bool('SRPO_GATEWAY_TOKEN_PROMPTS', false)) {
    if (dir === undefined)
      throw new ConfigError(
        'SRPO_GATEWAY_TOKEN_PROMPTS',
        "needs SRPO_GATEWAY_TOKENIZER_DIR: the token prompt is rendered with the served model's chat template",
      );
    if (!upstreamTokenIds)
      throw new ConfigError(
        'SRPO_GATEWAY_TOKEN_PROMPTS',
        'needs token ids from the upstream (SRPO_GATEWAY_UPSTREAM_TOKEN_IDS=true): later turns are rebuilt from them',
      );
    tokenPrompts = ConfigError.guard('SRPO_GATEWAY_TOKENIZER_DIR', () => HfTextCodec.fromDirectory(dir));
  }
  return {
    kafka: { ...readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-gateway')), retries: r.int('SRPO_GATEWAY_KAFKA_RETRIES', 3, { min: 0, max: 20 }) },
    topics: { prefix: r.str('SRPO_TOPIC_PREFIX', 'srpo.') },
    upstreamUrl,
    upstreamApiKey: r.optionalStr('SRPO_GATEWAY_UPSTREAM_API_KEY'),
    models: readModels(r),
    upstreamTokenIds,
    strict: r.bool('SRPO_GATEWAY_STRICT', true),
    keys,
    retokenizer,
    tokenizerDir: dir,
    ...(tokenPrompts ? { tokenPrompts } : {}),
    fixedVersion: version === undefined ? undefined : r.int('SRPO_GATEWAY_VERSION', 0, { min: 0 }),
    host: r.str('SRPO_GATEWAY_HOST', '127.0.0.1'),
    port: r.int('SRPO_GATEWAY_PORT', 8100, { min: 0, max: 65535 }),
    upstreamTimeoutMs: r.int('SRPO_GATEWAY_UPSTREAM_TIMEOUT_MS', 120_000, { min: 100 }),
    maxInFlight: r.int('SRPO_GATEWAY_MAX_IN_FLIGHT', 256, { min: 1 }),
    keyRatePerS: r.num('SRPO_GATEWAY_KEY_RATE', 100, { min: 0 }),
    keyBurst: r.int('SRPO_GATEWAY_KEY_BURST', 200, { min: 1 }),
    episodeOwnersMax: r.int('SRPO_GATEWAY_EPISODE_OWNERS', 100_000, { min: 1 }),
    episodeOwnersTtlMs: r.int('SRPO_GATEWAY_EPISODE_TTL_MS', 3_600_000, { min: 1000 }),
    maxBodyBytes: r.int('SRPO_GATEWAY_MAX_BODY_BYTES', 4 * 1024 * 1024, { min: 1024 }),
    recordTimeoutMs: r.int('SRPO_GATEWAY_RECORD_TIMEOUT_MS', 60_000, { min: 100 }),
    ...(r.has('SRPO_GATEWAY_SPOOL_DIR') ? { spoolDir: path.resolve(cwd, r.str('SRPO_GATEWAY_SPOOL_DIR', '')) } : {}),
    spoolMaxBytes: r.int('SRPO_GATEWAY_SPOOL_MAX_BYTES', DEFAULT_SPOOL_MAX_BYTES, { min: 1024, max: 2 ** 40 }),
    ...(keyFile !== undefined && certFile !== undefined ? { tls: { keyFile: path.resolve(cwd, keyFile), certFile: path.resolve(cwd, certFile) } } : {}),
    ...(r.bool('SRPO_SEAL_CONTENT', false) ? { sealStore: readStore(r, cwd) } : {}),
    logLevel: r.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info'),
  };
}

export function applyGatewayConfig(config: GatewayConfig): void {
  Logger.configure({ level: config.logLevel });
}

function readModels(r: EnvReader): ReadonlyMap<string, string> | undefined {
  const pairs = r.list('SRPO_GATEWAY_MODELS', []);
  if (pairs.length === 0) return undefined;
  // A Map, not an object: on an object `__proto__=x` would vanish, and a lookup of `constructor` would find Object's.
  const out = new Map<string, string>();
  for (const p of pairs) {
    const [policy, model, ...rest] = p.split('=').map((s) => s.trim());
    if (!policy || !model || rest.length > 0) throw new ConfigError('SRPO_GATEWAY_MODELS', `expected policyId=upstreamModel pairs, got "${p}"`);
    out.set(policy, model);
  }
  return out;
}
