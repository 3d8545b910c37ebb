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
    expect(c.metricsPort).toBeUndefined();
  });

  it.each([
    [{}, 'SRPO_PUBLISH_SERVERS', /lists no server/],
    [{ SRPO_PUBLISH_SERVERS: 'a:8000' }, 'SRPO_PUBLISH_SERVERS', /not an http\(s\) URL/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a,http://a' }, 'SRPO_PUBLISH_SERVERS', /twice/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_GATEWAYS: 'ftp://g' }, 'SRPO_PUBLISH_GATEWAYS', /not an http/],
    [{ SRPO_PUBLISH_SERVERS: 'http://a', SRPO_PUBLISH_KEEP: '0' }, 'SRPO_PUBLISH_KEEP', />= 1/],
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
