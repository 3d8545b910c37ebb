import * as path from 'path';
import { ConfigError, repoRoot } from '@srpo/core';
import { loadGatewayConfig } from './gateway-config';

describe('gateway configuration', () => {
  it('defaults: srpo serve on :8000 upstream, strict, ids asked for, no keys, port 8100', () => {
    const c = loadGatewayConfig({}, '/work');
    expect([c.upstreamUrl, c.strict, c.upstreamTokenIds, c.keys.enabled, c.port, c.models, c.retokenizer]).toEqual([
      'http://127.0.0.1:8000/v1',
      true,
      true,
      false,
      8100,
      undefined,
      undefined,
    ]);
  });

  it("SRPO_SEAL_CONTENT: the store that holds the content keys, the learner's by default; off by default", () => {
    expect(loadGatewayConfig({}, '/work').sealStore).toBeUndefined();
    expect(loadGatewayConfig({ SRPO_SEAL_CONTENT: 'true' }, '/work').sealStore).toEqual({ kind: 'sqlite', path: '/work/.srpo/learner.sqlite' });
    expect(loadGatewayConfig({ SRPO_SEAL_CONTENT: 'true', SRPO_DATABASE_URL: 'postgres://u:p@db:5432/srpo' }, '/work').sealStore).toEqual({
      kind: 'postgres',
      url: 'postgres://u:p@db:5432/srpo',
    });
    expect(() => loadGatewayConfig({ SRPO_SEAL_CONTENT: 'maybe' }, '/work')).toThrow(/SRPO_SEAL_CONTENT/);
  });

  it('reads models, keys, a tokenizer directory, a fixed version and TLS files', () => {
    const c = loadGatewayConfig(
      {
        SRPO_GATEWAY_MODELS: 'actor=Qwen/Qwen2-0.5B, judge=judge-lora',
        SRPO_GATEWAY_API_KEYS: '{"sk-aaaaaaaaaaaaaaaa": ["actor"]}',
        SRPO_GATEWAY_TOKENIZER_DIR: path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2'),
        SRPO_GATEWAY_VERSION: '12',
        SRPO_GATEWAY_TLS_KEY: 'k.pem',
        SRPO_GATEWAY_TLS_CERT: 'c.pem',
      },
      '/work',
    );
    expect(c.models).toEqual(
      new Map([
        ['actor', 'Qwen/Qwen2-0.5B'],
        ['judge', 'judge-lora'],
      ]),
    );
    expect(c.keys.enabled).toBe(true);
    expect(c.retokenizer).toBeDefined();
    expect(c.fixedVersion).toBe(12);
    expect(c.tls).toEqual({ keyFile: '/work/k.pem', certFile: '/work/c.pem' });
  });

  it('keeps a policy id such as __proto__ or constructor as an ordinary model, and looks up no inherited one', () => {
    const c = loadGatewayConfig({ SRPO_GATEWAY_MODELS: '__proto__=up-a, constructor=up-b' }, '/work');
    expect([...(c.models ?? [])]).toEqual([
      ['__proto__', 'up-a'],
      ['constructor', 'up-b'],
    ]);
    const plain = loadGatewayConfig({ SRPO_GATEWAY_MODELS: 'actor=m' }, '/work').models;
    expect(['__proto__', 'constructor', 'toString', 'hasOwnProperty'].map((id) => plain?.get(id))).toEqual([undefined, undefined, undefined, undefined]);
  });

  it('per-key limits and episode ownership: defaults, and what is set', () => {
    const d = loadGatewayConfig({}, '/work');
    expect([d.keyRatePerS, d.keyBurst, d.episodeOwnersMax, d.episodeOwnersTtlMs]).toEqual([100, 200, 100_000, 3_600_000]);
    const c = loadGatewayConfig(
      { SRPO_GATEWAY_KEY_RATE: '0.5', SRPO_GATEWAY_KEY_BURST: '3', SRPO_GATEWAY_EPISODE_OWNERS: '10', SRPO_GATEWAY_EPISODE_TTL_MS: '60000' },
      '/work',
    );
    expect([c.keyRatePerS, c.keyBurst, c.episodeOwnersMax, c.episodeOwnersTtlMs]).toEqual([0.5, 3, 10, 60_000]);
  });

  it('names neither a key nor the upstream credentials in its errors', () => {
    const messages = [
      { SRPO_GATEWAY_API_KEYS: '{"sk-Qz8short": ["a"]}' },
      { SRPO_GATEWAY_API_KEYS: '{"sk-Qz8long-enough-key": []}' },
      { SRPO_GATEWAY_UPSTREAM: 'ftp://user:Qz8secret@host/v1' },
    ].map((env) => {
      try {
        loadGatewayConfig(env, '/work');
      } catch (e) {
        return (e as Error).message;
      }
      return 'accepted';
    });
    expect(messages).toHaveLength(3);
    for (const m of messages) expect(m).toMatch(/SRPO_GATEWAY_(API_KEYS|UPSTREAM): (key #|must be)/);
    for (const m of messages) expect(m).not.toMatch(/Qz8|sk-/);
  });

  it('bounds the spool: 256 MiB by default, or SRPO_GATEWAY_SPOOL_MAX_BYTES', () => {
    expect(loadGatewayConfig({}, '/work').spoolMaxBytes).toBe(256 * 1024 * 1024);
    expect(loadGatewayConfig({ SRPO_GATEWAY_SPOOL_DIR: 'spool', SRPO_GATEWAY_SPOOL_MAX_BYTES: '4096' }, '/work')).toMatchObject({
      spoolDir: '/work/spool',
      spoolMaxBytes: 4096,
    });
  });

  const QWEN2_DIR = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
  it.each([
    [{ SRPO_GATEWAY_UPSTREAM: 'localhost:8000' }, 'SRPO_GATEWAY_UPSTREAM', /http\(s\) URL/],
    [{ SRPO_GATEWAY_API_KEYS: '[]' }, 'SRPO_GATEWAY_API_KEYS', /non-empty JSON object/],
    [{ SRPO_GATEWAY_MODELS: 'actor' }, 'SRPO_GATEWAY_MODELS', /policyId=upstreamModel/],
    [{ SRPO_GATEWAY_TOKENIZER_DIR: '/nonexistent' }, 'SRPO_GATEWAY_TOKENIZER_DIR', /tokenizer\.json/],
    [{ SRPO_GATEWAY_TLS_KEY: 'k.pem' }, 'SRPO_GATEWAY_TLS_CERT', /both/],
    [{ SRPO_GATEWAY_STRICT: 'sometimes' }, 'SRPO_GATEWAY_STRICT', /true or false/],
    [{ SRPO_GATEWAY_KEY_RATE: '-1' }, 'SRPO_GATEWAY_KEY_RATE', /./],
    [{ SRPO_GATEWAY_KEY_BURST: '0' }, 'SRPO_GATEWAY_KEY_BURST', /./],
    [{ SRPO_GATEWAY_EPISODE_OWNERS: '0' }, 'SRPO_GATEWAY_EPISODE_OWNERS', /./],
    [{ SRPO_GATEWAY_SPOOL_MAX_BYTES: '100' }, 'SRPO_GATEWAY_SPOOL_MAX_BYTES', /must be >= 1024/],
    [{ SRPO_GATEWAY_TOKEN_PROMPTS: 'true' }, 'SRPO_GATEWAY_TOKEN_PROMPTS', /needs SRPO_GATEWAY_TOKENIZER_DIR/],
    [
      { SRPO_GATEWAY_TOKEN_PROMPTS: 'true', SRPO_GATEWAY_TOKENIZER_DIR: QWEN2_DIR, SRPO_GATEWAY_UPSTREAM_TOKEN_IDS: 'false' },
      'SRPO_GATEWAY_TOKEN_PROMPTS',
      /needs token ids from the upstream/,
    ],
  ])('fails fast naming the variable: %j', (env, variable, message) => {
    let error: unknown;
    try {
      loadGatewayConfig(env, '/work');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).field).toBe(variable);
    expect((error as Error).message).toMatch(message);
  });
});
