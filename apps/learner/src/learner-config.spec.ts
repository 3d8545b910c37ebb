import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ConfigError, ErrorCode, repoRoot } from '@srpo/core';
import { DEFAULT_OBJECTIVE_CONFIG } from '@srpo/srpo';
import { DEFAULT_MODEL } from '@srpo/trainer';
import { loadLearnerConfig } from './learner-config';

const CWD = '/srv/learner';
const HF_QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const load = (env: Record<string, string>) => loadLearnerConfig(env, CWD);

function failure(env: Record<string, string>): ConfigError {
  try {
    load(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('expected the config to be refused');
}

describe('loadLearnerConfig', () => {
  it('fills every default from a minimal environment', () => {
    const c = load({ SRPO_POLICY_ID: 'solver' });
    expect(c).toMatchObject({
      policyId: 'solver',
      policyRoles: ['solver'],
      store: { kind: 'sqlite', path: path.join(CWD, '.srpo/learner.sqlite') },
      checkpointDir: path.join(CWD, '.srpo/checkpoints'),
      checkpointRetention: { keepLast: 20, keepEvery: 100 },
      setsPerUpdate: 16,
      maxPolicyLag: 4,
      epochs: 1,
      lr: 3e-4,
      maxGradNorm: 1,
      seed: 0,
      backend: 'auto',
      httpHost: '127.0.0.1',
      httpPort: 3000,
      apiToken: undefined,
      apiReadToken: undefined,
      topics: { prefix: 'srpo.' },
      consumerGroupId: 'srpo-learner.solver',
      crashAt: undefined,
      slowMicroBatchMs: 0,
      logLevel: 'info',
      sessionTimeoutMs: 30_000,
      warnings: [],
    });
    expect(c.objective).toEqual({ ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress } });
    expect(c.model).toEqual(DEFAULT_MODEL);
    expect(c.kafka.brokers).toEqual(['127.0.0.1:9092']);
    expect(c.codeVersion).toBe('srpo-kafka@0.1.0');
  });

  it('reads every variable it documents', () => {
    const c = load({
      SRPO_POLICY_ID: 'critic-2',
      SRPO_POLICY_ROLES: 'critic, judge',
      SRPO_DATABASE_URL: 'postgresql://u:secret@db:5432/srpo',
      SRPO_DATABASE_SCHEMA: 'learner',
      SRPO_CHECKPOINT_DIR: '/data/ckpt',
      SRPO_CHECKPOINT_KEEP_LAST: '5',
      SRPO_CHECKPOINT_KEEP_EVERY: '50',
      SRPO_SETS_PER_UPDATE: '32',
      SRPO_MAX_POLICY_LAG: '0',
      SRPO_EPOCHS: '3',
      SRPO_LR: '1e-5',
      SRPO_MAX_GRAD_NORM: '0',
      SRPO_SEED: '42',
      SRPO_OBJECTIVE: 'gspo',
      SRPO_EVENT_REDUCTION: 'mean',
      SRPO_CLIP_LOW: '0.1',
      SRPO_CLIP_HIGH: '0.28',
      SRPO_MODEL_CONFIG: '{"vocabSize":64,"dModel":16,"nLayers":1,"nHeads":2,"maxSeqLen":32}',
      SRPO_BACKEND: 'cpu',
      SRPO_HTTP_HOST: '0.0.0.0',
      SRPO_HTTP_PORT: '8080',
      SRPO_API_TOKEN: 'w'.repeat(16),
      SRPO_API_READ_TOKEN: 'r'.repeat(20),
      SRPO_TOPIC_PREFIX: 'run7.',
      SRPO_CONSUMER_GROUP: 'g',
      SRPO_CODE_VERSION: 'abc123',
      SRPO_CRASH_AT: 'after-db',
      SRPO_LOG_LEVEL: 'warn',
      KAFKA_BROKERS: 'k1:9092,k2:9092',
    });
    expect(c).toMatchObject({
      policyId: 'critic-2',
      policyRoles: ['critic', 'judge'],
      store: { kind: 'postgres', url: 'postgresql://u:secret@db:5432/srpo', schema: 'learner' },
      checkpointDir: '/data/ckpt',
      checkpointRetention: { keepLast: 5, keepEvery: 50 },
      setsPerUpdate: 32,
      maxPolicyLag: 0,
      epochs: 3,
      lr: 1e-5,
      maxGradNorm: 0,
      seed: 42,
      objective: { objective: 'gspo', eventReduction: 'mean', clipLow: 0.1, clipHigh: 0.28 },
      backend: 'cpu',
      httpHost: '0.0.0.0',
      httpPort: 8080,
      apiToken: 'wwwwwwwwwwwwwwww',
      apiReadToken: 'rrrrrrrrrrrrrrrrrrrr',
      topics: { prefix: 'run7.' },
      consumerGroupId: 'g',
      codeVersion: 'abc123',
      crashAt: 'after-db',
      logLevel: 'warn',
    });
    expect(c.model).toEqual({ vocabSize: 64, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 32, dMlp: 64, tiedEmbeddings: true, layerNormEps: 1e-5 });
    expect(c.kafka.brokers).toEqual(['k1:9092', 'k2:9092']);
  });

  it('listens on loopback by default; another host is taken as given, and without a token it warns', () => {
    for (const host of ['::1', 'localhost', '127.0.0.2'])
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: host })).toMatchObject({ httpHost: host, warnings: [] });
    for (const host of ['0.0.0.0', '::', '10.1.2.3', 'learner.internal']) {
      const c = load({ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: host });
      expect(c.httpHost).toBe(host);
      expect(c.warnings).toEqual([
        `SRPO_HTTP_HOST=${host} accepts connections from other machines and neither SRPO_API_TOKEN nor SRPO_API_READ_TOKEN is set: ` +
          'the audit record, the metrics and verify are open to anyone who can reach the port',
      ]);
    }
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: '0.0.0.0', SRPO_API_TOKEN: 'w'.repeat(16) }).warnings).toEqual([]);
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: '0.0.0.0', SRPO_API_READ_TOKEN: 'r'.repeat(16) }).warnings).toEqual([]);
  });

  it.each([
    [{}, 'SRPO_POLICY_ID', /is required/],
    [{ SRPO_POLICY_ID: '../etc' }, 'SRPO_POLICY_ID', /must match/],
    [{ SRPO_POLICY_ID: 'p', SRPO_SETS_PER_UPDATE: 'many' }, 'SRPO_SETS_PER_UPDATE', /expected an integer, got "many"/],
    [{ SRPO_POLICY_ID: 'p', SRPO_SETS_PER_UPDATE: '0' }, 'SRPO_SETS_PER_UPDATE', /must be >= 1/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CHECKPOINT_KEEP_LAST: '-1' }, 'SRPO_CHECKPOINT_KEEP_LAST', /must be >= 0/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CHECKPOINT_KEEP_LAST: 'all' }, 'SRPO_CHECKPOINT_KEEP_LAST', /expected an integer, got "all"/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CHECKPOINT_KEEP_EVERY: '-5' }, 'SRPO_CHECKPOINT_KEEP_EVERY', /must be >= 0/],
    [{ SRPO_POLICY_ID: 'p', SRPO_MAX_POLICY_LAG: '-1' }, 'SRPO_MAX_POLICY_LAG', /must be >= 0/],
    [{ SRPO_POLICY_ID: 'p', SRPO_EPOCHS: '1.5' }, 'SRPO_EPOCHS', /expected an integer/],
    [{ SRPO_POLICY_ID: 'p', SRPO_LR: 'fast' }, 'SRPO_LR', /expected a number/],
    [{ SRPO_POLICY_ID: 'p', SRPO_MAX_GRAD_NORM: '-2' }, 'SRPO_MAX_GRAD_NORM', /must be >= 0/],
    [{ SRPO_POLICY_ID: 'p', SRPO_SEED: '-3' }, 'SRPO_SEED', /must be >= 0/],
    [{ SRPO_POLICY_ID: 'p', SRPO_OBJECTIVE: 'ppo' }, 'SRPO_OBJECTIVE', /expected one of srpo, gspo, grpo-token, srpo-length-norm, got "ppo"/],
    [{ SRPO_POLICY_ID: 'p', SRPO_EVENT_REDUCTION: 'max' }, 'SRPO_EVENT_REDUCTION', /expected one of sqrt, sum, mean/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CLIP_LOW: '1.5' }, 'SRPO_CLIP_LOW', /must be <= 1/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CLIP_HIGH: 'abc' }, 'SRPO_CLIP_HIGH', /expected a number, got "abc"/],
    [{ SRPO_POLICY_ID: 'p', SRPO_DUAL_CLIP: 'maybe' }, 'SRPO_DUAL_CLIP', /expected true or false, got "maybe"/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CLIP_RATIO_C: '1' }, 'SRPO_CLIP_RATIO_C', /must be > 1/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CLIP_RATIO_C: '0.5' }, 'SRPO_CLIP_RATIO_C', /must be > 1 \(the dual clip's c\), got 0.5/],
    [{ SRPO_POLICY_ID: 'p', SRPO_BACKEND: 'gpu' }, 'SRPO_BACKEND', /expected one of auto, tensorflow-gpu, tensorflow, cpu/],
    [{ SRPO_POLICY_ID: 'p', SRPO_HTTP_PORT: '70000' }, 'SRPO_HTTP_PORT', /must be <= 65535/],
    [{ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: '[::1]' }, 'SRPO_HTTP_HOST', /must be an IP address .* without brackets or port, got "\[::1\]"/],
    [{ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: '0.0.0.0:3000' }, 'SRPO_HTTP_HOST', /must be an IP address/],
    [{ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: 'http://learner' }, 'SRPO_HTTP_HOST', /must be an IP address/],
    [{ SRPO_POLICY_ID: 'p', SRPO_HTTP_HOST: '  ' }, 'SRPO_HTTP_HOST', /must be an IP address/],
    [{ SRPO_POLICY_ID: 'p', SRPO_API_TOKEN: 'short' }, 'SRPO_API_TOKEN', /at least 16 characters/],
    [{ SRPO_POLICY_ID: 'p', SRPO_API_READ_TOKEN: 'short' }, 'SRPO_API_READ_TOKEN', /at least 16 characters/],
    [{ SRPO_POLICY_ID: 'p', SRPO_DATABASE_URL: 'mysql://db/x' }, 'SRPO_DATABASE_URL', /scheme must be postgres/],
    [{ SRPO_POLICY_ID: 'p', SRPO_DATABASE_URL: 'not a url' }, 'SRPO_DATABASE_URL', /not a valid URL/],
    [{ SRPO_POLICY_ID: 'p', SRPO_DATABASE_SCHEMA: 's' }, 'SRPO_DATABASE_SCHEMA', /only applies to PostgreSQL/],
    [{ SRPO_POLICY_ID: 'p', SRPO_MODEL_CONFIG: '{"vocabSize":64' }, 'SRPO_MODEL_CONFIG', /not valid JSON/],
    [
      { SRPO_POLICY_ID: 'p', SRPO_MODEL_CONFIG: '{"vocabSize":64,"dModel":10,"nLayers":1,"nHeads":3,"maxSeqLen":8}' },
      'SRPO_MODEL_CONFIG',
      /config\.nHeads: must divide dModel/,
    ],
    [{ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: '/nonexistent/model' }, 'SRPO_MODEL_DIR', /\/nonexistent\/model: not a directory/],
    [
      { SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_MODEL_CONFIG: '{"vocabSize":64,"dModel":16,"nLayers":1,"nHeads":2,"maxSeqLen":32}' },
      'SRPO_MODEL_DIR',
      /not both/,
    ],
    [{ SRPO_POLICY_ID: 'p', SRPO_LORA: '{"r":4}' }, 'SRPO_LORA', /needs SRPO_MODEL_DIR/],
    [{ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{"r":0}' }, 'SRPO_LORA', /SRPO_LORA\.r/],
    [{ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{"targetModules":["q_proj","gate"]}' }, 'SRPO_LORA', /SRPO_LORA\.targetModules\[1\]/],
    [{ SRPO_POLICY_ID: 'p', SRPO_CRASH_AT: 'before-step' }, 'SRPO_CRASH_AT', /expected one of after-step, after-checkpoint, after-db, after-publish/],
    [{ SRPO_POLICY_ID: 'p', KAFKA_SASL_MECHANISM: 'plain' }, 'KAFKA_SASL_USERNAME', /is required/],
  ] as [Record<string, string>, string, RegExp][])('refuses %j naming %s', (env, variable, problem) => {
    const e = failure(env);
    expect(e.code).toBe(ErrorCode.CONFIG_INVALID);
    expect(e.field).toBe(variable);
    expect(e.message).toMatch(new RegExp(`^invalid configuration ${variable}: `));
    expect(e.message).toMatch(problem);
  });

  it('takes a Hugging Face directory as version 0 (SRPO_MODEL_DIR), checking its config at boot', () => {
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2 }).modelDir).toBe(HF_QWEN2);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-modeldir-'));
    const config = JSON.parse(fs.readFileSync(path.join(HF_QWEN2, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, hidden_act: 'gelu' }));
    const e = failure({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: dir });
    expect([e.field, e.message]).toEqual([
      'SRPO_MODEL_DIR',
      'invalid configuration SRPO_MODEL_DIR: config.json hidden_act="gelu": only silu (SwiGLU MLP) is implemented',
    ]);
  });

  it('reads LoRA settings (SRPO_LORA) for a Hugging Face base, filling defaults', () => {
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{"r":4,"targetModules":["q_proj","down_proj"]}' }).lora).toEqual({
      r: 4,
      alpha: 16,
      dropout: 0,
      targetModules: ['q_proj', 'down_proj'],
    });
  });

  it('reads the dual clip from SRPO_DUAL_CLIP and SRPO_CLIP_RATIO_C (default on, c = 3)', () => {
    expect(load({ SRPO_POLICY_ID: 'p' }).objective).toMatchObject({ dualClip: true, clipRatioC: 3 });
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_DUAL_CLIP: 'false', SRPO_CLIP_RATIO_C: '5' }).objective).toMatchObject({ dualClip: false, clipRatioC: 5 });
  });

  it('reads the mismatch correction and KL penalty (default: none, cap 2, bound ln 2, β 0)', () => {
    expect(load({ SRPO_POLICY_ID: 'p' }).correction).toEqual({ correction: 'none', cap: 2, bound: Math.LN2, klCoef: 0 });
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_CORRECTION: 'mis', SRPO_CORRECTION_BOUND: '0.1', SRPO_CORRECTION_CAP: '3' }).correction).toEqual({
      correction: 'mis',
      cap: 3,
      bound: 0.1,
      klCoef: 0,
    });
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{}', SRPO_KL_COEF: '0.05' }).correction.klCoef).toBe(0.05);
  });

  it.each([
    [{ SRPO_CORRECTION: 'is' }, 'SRPO_CORRECTION'],
    [{ SRPO_CORRECTION_CAP: '0.5' }, 'SRPO_CORRECTION_CAP'],
    [{ SRPO_CORRECTION_BOUND: '0' }, 'SRPO_CORRECTION_BOUND'],
    [{ SRPO_KL_COEF: '-1' }, 'SRPO_KL_COEF'],
    // Full weights have no reference policy.
    [{ SRPO_KL_COEF: '0.1' }, 'SRPO_KL_COEF'],
  ])('refuses %j naming %s', (env, variable) => {
    const e = failure({ SRPO_POLICY_ID: 'p', ...env });
    expect(e.message).toContain(variable);
  });

  it('keeps every checkpoint with SRPO_CHECKPOINT_KEEP_LAST=0 and allows no anchors with SRPO_CHECKPOINT_KEEP_EVERY=0', () => {
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_CHECKPOINT_KEEP_LAST: '0' }).checkpointRetention).toEqual({ keepLast: 0, keepEvery: 100 });
    expect(load({ SRPO_POLICY_ID: 'p', SRPO_CHECKPOINT_KEEP_EVERY: '0' }).checkpointRetention).toEqual({ keepLast: 20, keepEvery: 0 });
  });

  it('never echoes a database URL (it may hold a password)', () => {
    const e = failure({ SRPO_POLICY_ID: 'p', SRPO_DATABASE_URL: 'mysql://u:hunter2@db/x' });
    expect(e.message).not.toContain('hunter2');
  });
  describe('defaults that fit a pretrained model', () => {
    it('takes the learning rate by model kind when SRPO_LR is unset: 3e-4 from scratch, 1e-4 LoRA, 1e-6 full weights', () => {
      expect(load({ SRPO_POLICY_ID: 'p' }).lr).toBe(3e-4);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{}' }).lr).toBe(1e-4);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2 }).lr).toBe(1e-6);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LR: '2e-6' }).lr).toBe(2e-6);
    });

    it('warns (and still starts) when a full-weight run takes a rate above 1e-5, or LoRA above 1e-3', () => {
      const full = load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LR: '5e-4' });
      expect(full.lr).toBe(5e-4);
      expect(full.warnings).toHaveLength(1);
      expect(full.warnings[0]).toMatch(
        /^SRPO_LR=0\.0005 is far above the guidance for a pretrained model's full weights \(default 0\.000001, warning above 0\.00001\)/,
      );
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LR: '1e-5' }).warnings).toEqual([]);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{}', SRPO_LR: '2e-4' }).warnings).toEqual([]);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{}', SRPO_LR: '5e-3' }).warnings[0]).toMatch(/for a LoRA adapter/);
      // The project transformer from scratch has no ceiling.
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_LR: '0.01' }).warnings).toEqual([]);
    });

    it('gives full-weight runs in one pass a 120 s session timeout (the pass blocks heartbeats), 30 s otherwise, and warns below 120 s', () => {
      const onePass = { SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_MICRO_BATCH_TOKENS: '0' };
      expect(load(onePass).sessionTimeoutMs).toBe(120_000);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{}' }).sessionTimeoutMs).toBe(30_000);
      // By default a Hugging Face model trains in micro-batches, so its full weights get 30 s too.
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2 }).sessionTimeoutMs).toBe(30_000);
      const short = load({ ...onePass, SRPO_SESSION_TIMEOUT_MS: '10000' });
      expect(short.sessionTimeoutMs).toBe(10_000);
      expect(short.warnings).toEqual([
        expect.stringMatching(/^SRPO_SESSION_TIMEOUT_MS=10000 with a full-weight Hugging Face model in one pass.*SRPO_MICRO_BATCH_TOKENS/),
      ]);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_SESSION_TIMEOUT_MS: '10000' }).warnings).toEqual([]);
      // Micro-batches: heartbeats leave between them, so a micro-batch, not the update, is what the timeout must cover.
      const micro = load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_MICRO_BATCH_TOKENS: '2048' });
      expect(micro.sessionTimeoutMs).toBe(30_000);
      expect(micro.warnings).toEqual([]);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_MICRO_BATCH_TOKENS: '2048', SRPO_SESSION_TIMEOUT_MS: '10000' }).warnings).toEqual([]);
    });

    it('trains a Hugging Face model in micro-batches of 1,024 positions by default (memory), the project transformer in one pass', () => {
      expect(load({ SRPO_POLICY_ID: 'p' }).microBatchTokens).toBe(0);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2 }).microBatchTokens).toBe(1024);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LORA: '{}' }).microBatchTokens).toBe(1024);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_MICRO_BATCH_TOKENS: '0' }).microBatchTokens).toBe(0);
      expect(load({ SRPO_POLICY_ID: 'p', SRPO_MICRO_BATCH_TOKENS: '512' }).microBatchTokens).toBe(512);
    });

    it('still refuses a negative SRPO_LR or an out-of-range SRPO_SESSION_TIMEOUT_MS, naming it', () => {
      expect(failure({ SRPO_POLICY_ID: 'p', SRPO_MODEL_DIR: HF_QWEN2, SRPO_LR: '-1' }).field).toBe('SRPO_LR');
      expect(failure({ SRPO_POLICY_ID: 'p', SRPO_SESSION_TIMEOUT_MS: '1000' }).field).toBe('SRPO_SESSION_TIMEOUT_MS');
    });
  });
});
