import * as path from 'path';
import { ConfigError, type EnvReader } from '@srpo/core';
import { readKafkaConnection, type KafkaConnectionOptions, type TopicCatalogOptions } from '@srpo/events';

export interface PublisherConfig {
  kafka: KafkaConnectionOptions;
  topics: TopicCatalogOptions;
  servers: string[];
  gateways: string[];
  policies: string[];
  exportDir: string;
  keep: number;
  serverApiKey?: string;
  gatewayApiKey?: string;
  retryMaxMs: number;
  requestTimeoutMs: number;
  reconcileMs: number;
  metricsPort?: number;
}

/**
 * The publisher's settings, read through the caller's `EnvReader` (the `srpo publish`
 * command's environment and flags); fails naming the variable.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | `SRPO_PUBLISH_SERVERS` | required | comma-separated servers with vLLM's LoRA endpoints: `http://a:8000,http://b:8001` |
 * | `SRPO_PUBLISH_GATEWAYS` | none | `srpo gateway`s told each policy's current served name |
 * | `SRPO_PUBLISH_POLICIES` | all | the policies published |
 * | `SRPO_PUBLISH_DIR` | `.srpo/published` | where each version's peft directory is written (the servers read it) |
 * | `SRPO_PUBLISH_KEEP` | 3 | versions per policy left loaded on each server |
 * | `SRPO_PUBLISH_SERVER_API_KEY` | unset | bearer key for the servers |
 * | `SRPO_PUBLISH_GATEWAY_API_KEY` | unset | an admin key of the gateways |
 * | `SRPO_PUBLISH_RETRY_MAX_MS` | 30000 | longest wait between retries of a server that is down |
 * | `SRPO_PUBLISH_TIMEOUT_MS` | 60000 | longest wait for one call |
 * | `SRPO_PUBLISH_RECONCILE_MS` | 30000 | how often servers and gateways are checked for what a restart lost (0: never) |
 * | `SRPO_PUBLISH_METRICS_PORT` | unset | serve `/metrics` (Prometheus) on this port |
 * | `KAFKA_*`, `SRPO_TOPIC_PREFIX` | local broker, `srpo.` | where policy-versions is followed |
 */
export function readPublisherConfig(r: EnvReader, cwd: string): PublisherConfig {
  const urls = (name: string, required: boolean): string[] => {
    const list = r.list(name, []);
    if (required && list.length === 0) throw new ConfigError(name, 'lists no server (e.g. http://127.0.0.1:8000)');
    for (const u of list) {
      let ok = false;
      try {
        ok = ['http:', 'https:'].includes(new URL(u).protocol);
      } catch {
        ok = false;
      }
      if (!ok) throw new ConfigError(name, `"${u}" is not an http(s) URL`);
    }
    if (new Set(list).size !== list.length) throw new ConfigError(name, 'lists a server twice');
    return list;
  };
  const metricsPort = r.optionalStr('SRPO_PUBLISH_METRICS_PORT') === undefined ? undefined : r.int('SRPO_PUBLISH_METRICS_PORT', 0, { min: 0, max: 65535 });
  return {
    kafka: readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-publish')),
    topics: { prefix: r.str('SRPO_TOPIC_PREFIX', 'srpo.') },
    servers: urls('SRPO_PUBLISH_SERVERS', true),
    gateways: urls('SRPO_PUBLISH_GATEWAYS', false),
    policies: r.list('SRPO_PUBLISH_POLICIES', []),
    exportDir: path.resolve(cwd, r.str('SRPO_PUBLISH_DIR', '.srpo/published')),
    keep: r.int('SRPO_PUBLISH_KEEP', 3, { min: 1, max: 1000 }),
    serverApiKey: r.optionalStr('SRPO_PUBLISH_SERVER_API_KEY'),
    gatewayApiKey: r.optionalStr('SRPO_PUBLISH_GATEWAY_API_KEY'),
    retryMaxMs: r.int('SRPO_PUBLISH_RETRY_MAX_MS', 30_000, { min: 10 }),
    requestTimeoutMs: r.int('SRPO_PUBLISH_TIMEOUT_MS', 60_000, { min: 100 }),
    reconcileMs: r.int('SRPO_PUBLISH_RECONCILE_MS', 30_000, { min: 0 }),
    ...(metricsPort !== undefined ? { metricsPort } : {}),
  };
}
