import * as path from 'path';
import { ConfigError } from '@srpo/core';
import { loadServeConfig } from './serve-config';

const QWEN2 = path.join(__dirname, '..', '..', '..', 'libs', 'hf', 'fixtures', 'qwen2');

describe('serve configuration', () => {
  it('has working defaults: serves actor on 127.0.0.1:8000 from .srpo/checkpoints', () => {
    const c = loadServeConfig({}, '/work');
    expect(c.policies).toEqual(['actor']);
    expect([c.host, c.port, c.maxBatchRows, c.maxQueuedRows]).toEqual(['127.0.0.1', 8000, 64, 1024]);
    expect(c.checkpointDir).toBe(path.resolve('/work', '.srpo/checkpoints'));
    expect(c.topics.prefix).toBe('srpo.');
    expect([c.modelDir, c.modelName, c.maxLoras, c.runtimeLora]).toEqual([undefined, undefined, 8, true]);
    expect([c.kvCacheTokens, c.decodeProducts, c.maxTokens, c.keys.enabled]).toEqual([32_768, 'learner', 4096, false]);
    expect(loadServeConfig({ SRPO_SERVE_KV_CACHE_TOKENS: '0', SRPO_SERVE_DECODE_PRODUCTS: 'tensorflow' })).toMatchObject({
      kvCacheTokens: 0,
      decodeProducts: 'tensorflow',
    });
  });

  it('SRPO_SERVE_API_KEYS takes the gateway format; SRPO_SERVE_MAX_TOKENS sets the max_tokens ceiling', () => {
    const c = loadServeConfig({ SRPO_SERVE_API_KEYS: '{"sk-serve-aaaaaaaaaaaa": ["actor"]}', SRPO_SERVE_MAX_TOKENS: '64' });
    expect([c.keys.enabled, c.maxTokens]).toEqual([true, 64]);
    expect(() => c.keys.authorize('Bearer sk-serve-aaaaaaaaaaaa', 'judge')).toThrow(expect.objectContaining({ status: 403 }));
  });

  it('--model serves a directory under its name with no policy (no broker); --served-model-name renames it; policies may be added', () => {
    const c = loadServeConfig({ SRPO_SERVE_MODEL_DIR: QWEN2 }, '/work');
    expect([c.modelDir, c.modelName, c.policies]).toEqual([QWEN2, 'qwen2', []]);
    expect(loadServeConfig({ SRPO_SERVE_MODEL_DIR: QWEN2, SRPO_SERVE_MODEL_NAME: 'smol' }).modelName).toBe('smol');
    expect(loadServeConfig({ SRPO_SERVE_MODEL_DIR: QWEN2, SRPO_SERVE_POLICIES: 'actor' }).policies).toEqual(['actor']);
  });

  it.each([
    [{ SRPO_SERVE_POLICIES: 'a,a' }, 'SRPO_SERVE_POLICIES', /twice/],
    [{ SRPO_SERVE_POLICIES: 'a/b' }, 'SRPO_SERVE_POLICIES', /must match/],
    [{ SRPO_SERVE_PORT: '70000' }, 'SRPO_SERVE_PORT', /<= 65535/],
    [{ SRPO_SERVE_MAX_BATCH: '0' }, 'SRPO_SERVE_MAX_BATCH', />= 1/],
    [{ SRPO_BACKEND: 'tpu' }, 'SRPO_BACKEND', /one of/],
    [{ SRPO_SERVE_MODEL_DIR: '/nowhere' }, 'SRPO_SERVE_MODEL_DIR', /not a Hugging Face model directory/],
    [{ SRPO_SERVE_MODEL_DIR: QWEN2, SRPO_SERVE_MODEL_NAME: 'a b' }, 'SRPO_SERVE_MODEL_NAME', /without spaces/],
    [{ SRPO_SERVE_MODEL_DIR: QWEN2, SRPO_SERVE_POLICIES: 'qwen2' }, 'SRPO_SERVE_MODEL_NAME', /also a served policy/],
    [{ SRPO_SERVE_POLICIES: ',' }, 'SRPO_SERVE_POLICIES', /lists no policy/],
    [{ SRPO_SERVE_MAX_LORAS: '0' }, 'SRPO_SERVE_MAX_LORAS', />= 1/],
    [{ SRPO_SERVE_KV_CACHE_TOKENS: '-1' }, 'SRPO_SERVE_KV_CACHE_TOKENS', />= 0/],
    [{ SRPO_SERVE_KV_CACHE_TOKENS: '99999999' }, 'SRPO_SERVE_KV_CACHE_TOKENS', /<= 16777216/],
    [{ SRPO_SERVE_DECODE_PRODUCTS: 'blas' }, 'SRPO_SERVE_DECODE_PRODUCTS', /one of/],
    [{ SRPO_SERVE_API_KEYS: '{"short": ["actor"]}' }, 'SRPO_SERVE_API_KEYS', /key #1 \(key-[0-9a-f]{8}\) is shorter than 16/],
    [{ SRPO_SERVE_API_KEYS: '[]' }, 'SRPO_SERVE_API_KEYS', /non-empty JSON object/],
    [{ SRPO_SERVE_MAX_TOKENS: '0' }, 'SRPO_SERVE_MAX_TOKENS', />= 1/],
  ])('fails fast naming the variable: %j', (env, variable, message) => {
    let error: unknown;
    try {
      loadServeConfig(env, '/work');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).field).toBe(variable);
    expect((error as Error).message).toMatch(message);
  });
});
