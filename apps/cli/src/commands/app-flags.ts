import * as path from 'path';
import { Command, InvalidArgumentError, Option } from 'commander';

/**
 * How `srpo learner|materializer|serve|gateway` take flags. Each flag names one variable of the
 * app's config module (`apps/<app>/src/<app>-config.ts`), which stays the only place that reads
 * and validates it: the CLI never imports another app (apps are leaves), so it puts the flag's
 * value in the child's environment, on top of the CLI's own (a flag wins over a variable), and
 * launches the app's compiled main. The CLI checks only the flag's syntax, so a typo fails
 * naming the flag before a process starts; the range and meaning are the config module's, whose
 * error names the variable (each flag's help says which).
 *
 * `default` repeats the config module's documented default for `--help`; a unit test compares
 * it with the module's table, so the two cannot drift apart.
 */
export type FlagKind = 'string' | 'path' | 'int' | 'number' | 'bool' | 'json' | 'choice';

export interface FlagSpec {
  /** `--sets-per-update` */
  flag: string;
  /** Placeholder shown by --help: `<n>`. */
  value: string;
  variable: string;
  /** As the config module documents it. */
  default: string;
  help: string;
  kind: FlagKind;
  choices?: readonly string[];
  /** For `int`: inclusive bounds checked here (the app checks them again, naming the variable). */
  min?: number;
  max?: number;
  /** The flag may stand alone (`--lora`); it then sets this value. */
  bare?: string;
}

/** commander's attribute name of a flag: `--sets-per-update` → `setsPerUpdate`. */
export function attributeName(flag: string): string {
  return flag.replace(/^--/, '').replace(/-([a-z0-9])/g, (_m: string, c: string) => c.toUpperCase());
}

/** The syntax check of one flag's value; returns the variable's text. */
export function parseFlagValue(spec: FlagSpec, raw: string): string {
  const value = raw.trim();
  switch (spec.kind) {
    case 'int': {
      const n = Number(value);
      if (value === '' || !Number.isSafeInteger(n)) throw new InvalidArgumentError(`must be an integer (sets ${spec.variable})`);
      if ((spec.min !== undefined && n < spec.min) || (spec.max !== undefined && n > spec.max))
        throw new InvalidArgumentError(`must be in [${spec.min ?? '-∞'}, ${spec.max ?? '∞'}] (sets ${spec.variable})`);
      return String(n);
    }
    case 'number': {
      const n = Number(value);
      if (value === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`must be a finite number such as 1e-4 (sets ${spec.variable})`);
      return value;
    }
    case 'bool': {
      const v = value.toLowerCase();
      if (['1', 'true', 'yes', 'on'].includes(v)) return 'true';
      if (['0', 'false', 'no', 'off'].includes(v)) return 'false';
      throw new InvalidArgumentError(`must be true or false (sets ${spec.variable})`);
    }
    case 'json':
      try {
        JSON.parse(value);
      } catch {
        throw new InvalidArgumentError(`must be JSON (sets ${spec.variable})`);
      }
      return value;
    case 'choice':
      if (!spec.choices?.includes(value)) throw new InvalidArgumentError(`must be one of ${spec.choices?.join(', ')} (sets ${spec.variable})`);
      return value;
    case 'path':
    case 'string':
      if (value === '') throw new InvalidArgumentError(`must not be empty (sets ${spec.variable})`);
      return value;
  }
}

/** `SRPO_LR, default by model kind`, or `SRPO_POLICY_ID, required`. */
export const flagHelpSuffix = (spec: FlagSpec): string =>
  spec.default === 'required' ? `${spec.variable}, required` : `${spec.variable}, default ${spec.default}`;

/** Adds each flag to `command`, its help ending with the variable it sets and the default. */
export function addFlags(command: Command, specs: readonly FlagSpec[]): Command {
  for (const spec of specs) {
    const value = spec.bare === undefined ? spec.value : spec.value.replace(/^<(.*)>$/, '[$1]');
    const option = new Option(`${spec.flag} ${value}`, `${spec.help} [${flagHelpSuffix(spec)}]`).argParser((raw: string) => parseFlagValue(spec, raw));
    command.addOption(option);
  }
  return command;
}

/**
 * The variables the given flags set (paths made absolute against `cwd`); flags left out are
 * absent, so the environment's value (or the app's default) stands.
 */
export function flagsToEnv(specs: readonly FlagSpec[], opts: Readonly<Record<string, unknown>>, cwd: string = process.cwd()): Record<string, string> {
  const env: Record<string, string> = {};
  for (const spec of specs) {
    let value = opts[attributeName(spec.flag)];
    if (value === true && spec.bare !== undefined) value = spec.bare;
    if (typeof value !== 'string') continue;
    env[spec.variable] = spec.kind === 'path' ? path.resolve(cwd, value) : value;
  }
  return env;
}

const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
const BACKENDS = ['auto', 'tensorflow-gpu', 'tensorflow', 'cpu'] as const;

/** Flags every app takes: where Kafka is, the topics' prefix, the log level. */
/** `/metrics` and `/health` of an app with a metrics endpoint (the materializer, `srpo judge`). */
export const METRICS_PORT_FLAG: FlagSpec = {
  flag: '--metrics-port',
  value: '<n>',
  variable: 'SRPO_METRICS_PORT',
  default: '0 (off)',
  help: '/metrics and /health on 127.0.0.1',
  kind: 'int',
  min: 0,
  max: 65535,
};

const COMMON: readonly FlagSpec[] = [
  { flag: '--brokers', value: '<list>', variable: 'KAFKA_BROKERS', default: 'local broker', help: 'comma-separated Kafka bootstrap brokers', kind: 'string' },
  { flag: '--topic-prefix', value: '<prefix>', variable: 'SRPO_TOPIC_PREFIX', default: 'srpo.', help: 'topic name prefix', kind: 'string' },
  {
    flag: '--log-level',
    value: '<level>',
    variable: 'SRPO_LOG_LEVEL',
    default: 'info',
    help: 'debug, info, warn or error',
    kind: 'choice',
    choices: LOG_LEVELS,
  },
];

const BACKEND: FlagSpec = {
  flag: '--backend',
  value: '<name>',
  variable: 'SRPO_BACKEND',
  default: 'auto',
  help: 'TensorFlow.js backend: auto, tensorflow-gpu, tensorflow or cpu',
  kind: 'choice',
  choices: BACKENDS,
};

const CHECKPOINTS: FlagSpec = {
  flag: '--checkpoints',
  value: '<dir>',
  variable: 'SRPO_CHECKPOINT_DIR',
  default: '.srpo/checkpoints',
  help: 'checkpoint root (one directory per policy version)',
  kind: 'path',
};

/** `srpo learner`: apps/learner/src/learner-config.ts. Tokens have no flag: a command line is visible to every user of the machine. */
export const LEARNER_FLAGS: readonly FlagSpec[] = [
  { flag: '--policy', value: '<id>', variable: 'SRPO_POLICY_ID', default: 'required', help: 'policy this learner trains', kind: 'string' },
  {
    flag: '--roles',
    value: '<list>',
    variable: 'SRPO_POLICY_ROLES',
    default: 'the policy id',
    help: 'agent roles recorded when the policy is first registered',
    kind: 'string',
  },
  {
    flag: '--model',
    value: '<dir>',
    variable: 'SRPO_MODEL_DIR',
    default: 'unset',
    help: 'a Hugging Face model directory as version 0 (instead of the seeded project transformer)',
    kind: 'path',
  },
  {
    flag: '--model-config',
    value: '<json>',
    variable: 'SRPO_MODEL_CONFIG',
    default: '{"vocabSize":256,"dModel":64,"nLayers":2,"nHeads":4,"maxSeqLen":128}',
    help: "the project transformer's shape (without --model)",
    kind: 'json',
  },
  {
    flag: '--lora',
    value: '<json>',
    variable: 'SRPO_LORA',
    default: 'unset',
    help: 'with --model: train a LoRA adapter on the frozen base; alone, the default settings ({}), or JSON such as {"r":8,"alpha":16}',
    kind: 'json',
    bare: '{}',
  },
  {
    flag: '--lr',
    value: '<rate>',
    variable: 'SRPO_LR',
    default: 'by model kind',
    help: "Adam's learning rate (docs/learner.md: learning rates)",
    kind: 'number',
  },
  {
    flag: '--sets-per-update',
    value: '<n>',
    variable: 'SRPO_SETS_PER_UPDATE',
    default: '16',
    help: 'active sets per update',
    kind: 'int',
    min: 1,
    max: 100_000,
  },
  { flag: '--epochs', value: '<n>', variable: 'SRPO_EPOCHS', default: '1', help: 'optimizer epochs per update', kind: 'int', min: 1, max: 1000 },
  {
    flag: '--max-policy-lag',
    value: '<n>',
    variable: 'SRPO_MAX_POLICY_LAG',
    default: '4',
    help: 'groups older than this many versions are skipped',
    kind: 'int',
    min: 0,
  },
  { flag: '--max-grad-norm', value: '<x>', variable: 'SRPO_MAX_GRAD_NORM', default: '1.0', help: 'global gradient-norm clip; 0 disables', kind: 'number' },
  {
    flag: '--micro-batch-tokens',
    value: '<n>',
    variable: 'SRPO_MICRO_BATCH_TOKENS',
    default: '0; 1024 for a Hugging Face model',
    help: 'largest padded forward pass; above it an update accumulates over micro-batches (and heartbeats between them)',
    kind: 'int',
    min: 0,
  },
  { flag: '--seed', value: '<n>', variable: 'SRPO_SEED', default: '0', help: 'seed of version 0 (or of the LoRA factors)', kind: 'int', min: 0 },
  {
    flag: '--objective',
    value: '<name>',
    variable: 'SRPO_OBJECTIVE',
    default: 'srpo',
    help: 'srpo, gspo, grpo-token or srpo-length-norm',
    kind: 'choice',
    choices: ['srpo', 'gspo', 'grpo-token', 'srpo-length-norm'],
  },
  { flag: '--clip-low', value: '<eps>', variable: 'SRPO_CLIP_LOW', default: '0.2', help: 'ε_low', kind: 'number' },
  { flag: '--clip-high', value: '<eps>', variable: 'SRPO_CLIP_HIGH', default: '0.2', help: 'ε_high', kind: 'number' },
  CHECKPOINTS,
  {
    flag: '--keep-last',
    value: '<n>',
    variable: 'SRPO_CHECKPOINT_KEEP_LAST',
    default: '20',
    help: 'checkpoints kept (newest committed versions); 0 keeps all',
    kind: 'int',
    min: 0,
  },
  {
    flag: '--keep-every',
    value: '<n>',
    variable: 'SRPO_CHECKPOINT_KEEP_EVERY',
    default: '100',
    help: 'also keep every version divisible by n',
    kind: 'int',
    min: 0,
  },
  {
    flag: '--database',
    value: '<url>',
    variable: 'SRPO_DATABASE_URL',
    default: 'unset',
    help: 'PostgreSQL URL of the audit store (unset: SQLite)',
    kind: 'string',
  },
  {
    flag: '--sqlite',
    value: '<file>',
    variable: 'SRPO_SQLITE_PATH',
    default: '.srpo/learner.sqlite',
    help: 'SQLite audit store when no database URL is set',
    kind: 'path',
  },
  {
    flag: '--host',
    value: '<addr>',
    variable: 'SRPO_HTTP_HOST',
    default: '127.0.0.1',
    help: 'address the HTTP API and dashboard listen on (0.0.0.0: every interface; set SRPO_API_TOKEN then)',
    kind: 'string',
  },
  { flag: '--port', value: '<n>', variable: 'SRPO_HTTP_PORT', default: '3000', help: 'HTTP API and dashboard port', kind: 'int', min: 0, max: 65535 },
  {
    flag: '--consumer-group',
    value: '<id>',
    variable: 'SRPO_CONSUMER_GROUP',
    default: 'srpo-learner.<policy id>',
    help: 'Kafka consumer group',
    kind: 'string',
  },
  {
    flag: '--session-timeout-ms',
    value: '<ms>',
    variable: 'SRPO_SESSION_TIMEOUT_MS',
    default: 'by model kind',
    help: 'consumer session timeout; at least twice the slowest piece of an update (a micro-batch, or the whole pass without them)',
    kind: 'int',
    min: 6000,
    max: 300_000,
  },
  BACKEND,
  ...COMMON,
];

/** `srpo materializer`: apps/materializer/src/materializer-config.ts (set and group settings: libs/materializer's readMaterializerSettings). */
export const MATERIALIZER_FLAGS: readonly FlagSpec[] = [
  {
    flag: '--app-id',
    value: '<id>',
    variable: 'SRPO_APP_ID',
    default: '<prefix>materializer',
    help: 'consumer groups, transactional ids, changelogs',
    kind: 'string',
  },
  { flag: '--roles', value: '<list>', variable: 'SRPO_MATERIALIZER_ROLES', default: 'sets,groups', help: 'sub-topologies this process runs', kind: 'string' },
  {
    flag: '--set-ttl-ms',
    value: '<ms>',
    variable: 'SRPO_SET_TTL_MS',
    default: '60000',
    help: "event time for a set's members and reward to arrive",
    kind: 'int',
    min: 1,
  },
  {
    flag: '--group-ttl-ms',
    value: '<ms>',
    variable: 'SRPO_GROUP_TTL_MS',
    default: '120000',
    help: 'event time for an undeclared group to fill',
    kind: 'int',
    min: 1,
  },
  {
    flag: '--reward-windows',
    value: '<list>',
    variable: 'SRPO_REWARD_WINDOWS',
    default: 'unset',
    help: 'per reward source, how long a set waits for its outcome, e.g. human=7d,ci=1h,judge=10m (docs/rewards.md)',
    kind: 'string',
  },
  {
    flag: '--state-store',
    value: '<kind>',
    variable: 'SRPO_STATE_STORE',
    default: 'lmdb',
    help: 'lmdb or memory',
    kind: 'choice',
    choices: ['lmdb', 'memory'],
  },
  {
    flag: '--state-dir',
    value: '<dir>',
    variable: 'SRPO_STATE_DIR',
    default: '<os tmpdir>/srpo-state',
    help: 'where the local state copies live',
    kind: 'path',
  },
  {
    flag: '--kafka-client',
    value: '<name>',
    variable: 'SRPO_KAFKA_CLIENT',
    default: 'kafkajs',
    help: "the stream runtime's client: kafkajs or platformatic",
    kind: 'choice',
    choices: ['kafkajs', 'platformatic'],
  },
  METRICS_PORT_FLAG,
  {
    flag: '--session-timeout-ms',
    value: '<ms>',
    variable: 'SRPO_SESSION_TIMEOUT_MS',
    default: '30000',
    help: 'consumer session timeout',
    kind: 'int',
    min: 6000,
    max: 300_000,
  },
  {
    flag: '--raw-partitions',
    value: '<n>',
    variable: 'SRPO_RAW_PARTITIONS',
    default: '6',
    help: 'partitions of raw topics it creates',
    kind: 'int',
    min: 1,
    max: 1024,
  },
  {
    flag: '--derived-partitions',
    value: '<n>',
    variable: 'SRPO_DERIVED_PARTITIONS',
    default: '3',
    help: 'partitions of derived topics it creates',
    kind: 'int',
    min: 1,
    max: 1024,
  },
  ...COMMON,
];

/** `srpo serve`: apps/serve/src/serve-config.ts. API keys have no flag (visible in `ps`): SRPO_SERVE_API_KEYS. */
export const SERVE_FLAGS: readonly FlagSpec[] = [
  {
    flag: '--policies',
    value: '<ids>',
    variable: 'SRPO_SERVE_POLICIES',
    default: 'actor',
    help: 'comma-separated policy ids to serve (none by default with --model)',
    kind: 'string',
  },
  {
    flag: '--model',
    value: '<dir>',
    variable: 'SRPO_SERVE_MODEL_DIR',
    default: 'unset',
    help: 'a Hugging Face directory served on its own, with no broker or learner',
    kind: 'path',
  },
  {
    flag: '--served-model-name',
    value: '<name>',
    variable: 'SRPO_SERVE_MODEL_NAME',
    default: "the directory's name",
    help: "the --model directory's model id",
    kind: 'string',
  },
  {
    flag: '--max-loras',
    value: '<n>',
    variable: 'SRPO_SERVE_MAX_LORAS',
    default: '8',
    help: 'LoRA adapters held at once over the --model base',
    kind: 'int',
    min: 1,
    max: 1024,
  },
  { flag: '--port', value: '<n>', variable: 'SRPO_SERVE_PORT', default: '8000', help: 'port', kind: 'int', min: 0, max: 65535 },
  { flag: '--host', value: '<addr>', variable: 'SRPO_SERVE_HOST', default: '127.0.0.1', help: 'address to listen on', kind: 'string' },
  { ...CHECKPOINTS, help: "the learners' checkpoint root" },
  {
    flag: '--max-batch',
    value: '<n>',
    variable: 'SRPO_SERVE_MAX_BATCH',
    default: '64',
    help: 'choices generated together per step',
    kind: 'int',
    min: 1,
    max: 4096,
  },
  {
    flag: '--max-queue',
    value: '<n>',
    variable: 'SRPO_SERVE_MAX_QUEUE',
    default: '1024',
    help: 'choices waiting before requests get 503',
    kind: 'int',
    min: 1,
  },
  {
    flag: '--kv-cache-tokens',
    value: '<n>',
    variable: 'SRPO_SERVE_KV_CACHE_TOKENS',
    default: '32768',
    help: 'KV-cache token slots of all choices together (past it choices wait, or are preempted and resumed; 0 turns the cache off)',
    kind: 'int',
    min: 0,
    max: 2 ** 24,
  },
  {
    flag: '--decode-products',
    value: '<kernels>',
    variable: 'SRPO_SERVE_DECODE_PRODUCTS',
    default: 'learner',
    help: "product kernels of cached decode steps: tensorflow (TensorFlow's MatMul at few rows) or learner (the learner's own)",
    kind: 'choice',
    choices: ['tensorflow', 'learner'],
  },
  {
    flag: '--max-tokens',
    value: '<n>',
    variable: 'SRPO_SERVE_MAX_TOKENS',
    default: '4096',
    help: 'most tokens one choice may ask for (max_tokens); above it requests get 400',
    kind: 'int',
    min: 1,
    max: 1_000_000,
  },
  {
    flag: '--startup-timeout-ms',
    value: '<ms>',
    variable: 'SRPO_SERVE_STARTUP_TIMEOUT_MS',
    default: '120000',
    help: 'longest wait for version 0 of every policy',
    kind: 'int',
    min: 0,
  },
  BACKEND,
  ...COMMON,
];

/** `srpo gateway`: apps/gateway/src/gateway-config.ts. API keys have no flag (visible in `ps`): SRPO_GATEWAY_API_KEYS. */
export const GATEWAY_FLAGS: readonly FlagSpec[] = [
  {
    flag: '--upstream',
    value: '<url>',
    variable: 'SRPO_GATEWAY_UPSTREAM',
    default: 'http://127.0.0.1:8000/v1',
    help: "the upstream's OpenAI base URL",
    kind: 'string',
  },
  { flag: '--port', value: '<n>', variable: 'SRPO_GATEWAY_PORT', default: '8100', help: 'port', kind: 'int', min: 0, max: 65535 },
  { flag: '--host', value: '<addr>', variable: 'SRPO_GATEWAY_HOST', default: '127.0.0.1', help: 'address to listen on', kind: 'string' },
  {
    flag: '--models',
    value: '<pairs>',
    variable: 'SRPO_GATEWAY_MODELS',
    default: 'unset',
    help: 'policyId=upstreamModel pairs, comma-separated',
    kind: 'string',
  },
  {
    flag: '--tokenizer',
    value: '<dir>',
    variable: 'SRPO_GATEWAY_TOKENIZER_DIR',
    default: 'unset',
    help: 'a Hugging Face directory whose tokenizer re-tokenizes upstream text when no ids come back',
    kind: 'path',
  },
  {
    flag: '--version',
    value: '<n>',
    variable: 'SRPO_GATEWAY_VERSION',
    default: 'unset',
    help: 'policy version recorded when the upstream reports none',
    kind: 'int',
    min: 0,
  },
  { flag: '--strict', value: '<bool>', variable: 'SRPO_GATEWAY_STRICT', default: 'true', help: 'refuse completions without episode fields', kind: 'bool' },
  { flag: '--spool-dir', value: '<dir>', variable: 'SRPO_GATEWAY_SPOOL_DIR', default: 'unset', help: 'spool events Kafka cannot take here', kind: 'path' },
  ...COMMON,
];
