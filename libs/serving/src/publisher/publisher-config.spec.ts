import * as path from 'path';
import { ConfigError, EnvReader } from '@srpo/core';
import { readPublisherConfig } from './publisher-config';
import { serverBase } from './lora-server-client';

const read = (env: Record<string, string>) => readPublisherConfig(new EnvReader(env), '/work');

describe('publisher configuration', () => {
  it('has defaults beside the required servers', () => {
    const c = read({ SRPO_PUBLISH_SERVERS: 'http://a:8000,http://b:8001/v1' });
    expect(c.servers).toEqual(['http://a:8000', 'http://b:8001/v1']);
    expect([c.gateways, c.policies, c.keep, c.retryMaxMs, c.reconcileMs]).toEqual([[], [], 3, 30_000, 30_000]);
    expect(c.exportDir).toBe(path.resolve('/work', '.srpo/published'));
    // The learner's and serve's default store: an announced checkpoint outside it is refused.
    expect(c.checkpointDir).toBe(path.resolve('/work', '.srpo/checkpoints'));
    expect(read({ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_CHECKPOINT_DIR: 'ckpt' }).checkpointDir).toBe(path.resolve('/work', 'ckpt'));
    expect(c.metricsPort).toBeUndefined();
    expect(c.gate).toBeUndefined();
  });

  it('a held-out file turns the gate on, with bounded defaults', () => {
    const c = read({ SRPO_PUBLISH_SERVERS: 'http://a:8000', SRPO_PUBLISH_GATE_FILE: 'held-out.jsonl' });
    expect(c.gate).toEqual({ file: '/work/held-out.jsonl', margin: 0.02, rule: 'point', maxItems: 200, maxTokens: 256, seed: 0, concurrency: 4 });
  });

  it.each([
    [{}, 'SRPO_PUBLISH_SERVERS', /lists no server/],
    [{ SRPO_PUBLISH_SERVERS: 'a:8000' }, 'SRPO_PUBLISH_SERVERS', /not an http\(s\) URL/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a,http://a' }, 'SRPO_PUBLISH_SERVERS', /twice/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_GATEWAYS: 'ftp://g' }, 'SRPO_PUBLISH_GATEWAYS', /not an http/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_KEEP: '0' }, 'SRPO_PUBLISH_KEEP', />= 1/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_GATE_FILE: 'h.jsonl', SRPO_PUBLISH_GATE_MARGIN: '1.5' }, 'SRPO_PUBLISH_GATE_MARGIN', /<= 1/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_GATE_FILE: 'h.jsonl', SRPO_PUBLISH_GATE_RULE: 'mean' }, 'SRPO_PUBLISH_GATE_RULE', /point/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_GATE_FILE: 'h.jsonl', SRPO_PUBLISH_GATE_ITEMS: '20000' }, 'SRPO_PUBLISH_GATE_ITEMS', /<= 10000/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_GATE_FILE: 'h.jsonl', SRPO_PUBLISH_GATE_MAX_TOKENS: '0' }, 'SRPO_PUBLISH_GATE_MAX_TOKENS', />= 1/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_GATE_FILE: 'h.jsonl', SRPO_PUBLISH_GATE_SERVER: 'http://b' }, 'SRPO_PUBLISH_GATE_SERVER', /not one of/],
  ])('fails naming the variable: %j', (env, variable, message) => {
    let error: unknown;
    try {
      read(env);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).field).toBe(variable);
    expect((error as Error).message).toMatch(message);
  });

  it("a server's root from what a user may write", () => {
    expect(['http://a:8000', 'http://a:8000/', 'http://a:8000/v1', 'http://a:8000/v1/'].map(serverBase)).toEqual(Array(4).fill('http://a:8000'));
  });
});
