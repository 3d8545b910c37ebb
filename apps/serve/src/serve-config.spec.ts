import * as path from 'path';
import { ConfigError } from '@srpo/core';
import { loadServeConfig } from './serve-config';

describe('serve configuration', () => {
  it('has working defaults: serves actor on 127.0.0.1:8000 from .srpo/checkpoints', () => {
    const c = loadServeConfig({}, '/work');
    expect(c.policies).toEqual(['actor']);
    expect([c.host, c.port, c.maxBatchRows, c.maxQueuedRows]).toEqual(['127.0.0.1', 8000, 64, 1024]);
    expect(c.checkpointDir).toBe(path.resolve('/work', '.srpo/checkpoints'));
    expect(c.topics.prefix).toBe('srpo.');
  });

  it.each([
    [{ SRPO_SERVE_POLICIES: 'a,a' }, 'SRPO_SERVE_POLICIES', /twice/],
    [{ SRPO_SERVE_POLICIES: 'a/b' }, 'SRPO_SERVE_POLICIES', /must match/],
    [{ SRPO_SERVE_PORT: '70000' }, 'SRPO_SERVE_PORT', /<= 65535/],
    [{ SRPO_SERVE_MAX_BATCH: '0' }, 'SRPO_SERVE_MAX_BATCH', />= 1/],
    [{ SRPO_BACKEND: 'tpu' }, 'SRPO_BACKEND', /one of/],
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
