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

  it.each([
    [{ SRPO_GATEWAY_UPSTREAM: 'localhost:8000' }, 'SRPO_GATEWAY_UPSTREAM', /http\(s\) URL/],
    [{ SRPO_GATEWAY_API_KEYS: '[]' }, 'SRPO_GATEWAY_API_KEYS', /non-empty JSON object/],
    [{ SRPO_GATEWAY_MODELS: 'actor' }, 'SRPO_GATEWAY_MODELS', /policyId=upstreamModel/],
    [{ SRPO_GATEWAY_TOKENIZER_DIR: '/nonexistent' }, 'SRPO_GATEWAY_TOKENIZER_DIR', /tokenizer\.json/],
    [{ SRPO_GATEWAY_TLS_KEY: 'k.pem' }, 'SRPO_GATEWAY_TLS_CERT', /both/],
    [{ SRPO_GATEWAY_STRICT: 'sometimes' }, 'SRPO_GATEWAY_STRICT', /true or false/],
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
