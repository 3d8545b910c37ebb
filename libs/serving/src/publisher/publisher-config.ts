import * as path from 'path';
import { ConfigError, type EnvReader } from '@srpo/core';
import { readKafkaConnection, type KafkaConnectionOptions, type TopicCatalogOptions } from '@srpo/events';
import { GATE_RULES, type GateRule } from './gate-rule';
import { HELD_OUT_LIMITS } from './held-out-evaluator';

/** The gate's settings (`SRPO_PUBLISH_GATE_*`); absent when no held-out file is set. */
export interface PublishGateConfig {
  file: string;
  margin: number;
  rule: GateRule;
  maxItems: number;
  maxTokens: number;
  seed: number;
  concurrency: number;
  server?: string;
}

export interface PublisherConfig {
  kafka: KafkaConnectionOptions;
  topics: TopicCatalogOptions;
  servers: string[];
  gateways: string[];
  policies: string[];
  exportDir: string;
  checkpointDir: string;
  keep: number;
  serverApiKey?: string;
  gatewayApiKey?: string;
  retryMaxMs: number;
  requestTimeoutMs: number;
  reconcileMs: number;
  metricsPort?: number;
  gate?: PublishGateConfig;
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
 * | `SRPO_CHECKPOINT_DIR` | `.srpo/checkpoints` | the learners' checkpoint store; a version whose checkpoint lies outside it (after `..` and symlinks) is refused |
 * | `SRPO_PUBLISH_KEEP` | 3 | versions per policy left loaded on each server |
 * | `SRPO_PUBLISH_SERVER_API_KEY` | unset | bearer key for the servers |
 * | `SRPO_PUBLISH_GATEWAY_API_KEY` | unset | an admin key of the gateways |
 * | `SRPO_PUBLISH_RETRY_MAX_MS` | 30000 | longest wait between retries of a server that is down |
 * | `SRPO_PUBLISH_TIMEOUT_MS` | 60000 | longest wait for one call |
 * | `SRPO_PUBLISH_RECONCILE_MS` | 30000 | how often servers and gateways are checked for what a restart lost (0: never) |
 * | `SRPO_PUBLISH_METRICS_PORT` | unset | serve `/metrics` (Prometheus) on this port |
 * | `SRPO_PUBLISH_GATE_FILE` | unset | held-out JSONL (`{messages, answer}` per line): turns the gate on |
 * | `SRPO_PUBLISH_GATE_MARGIN` | 0.02 | largest drop in held-out success rate published, in [0, 1] |
 * | `SRPO_PUBLISH_GATE_RULE` | point | `point` (difference ≥ −margin) or `lower` (its 95 % lower bound ≥ −margin) |
 * | `SRPO_PUBLISH_GATE_ITEMS` | 200 | items used (the file's first), at most 10000 |
 * | `SRPO_PUBLISH_GATE_MAX_TOKENS` | 256 | `max_tokens` per item, at most 4096 |
 * | `SRPO_PUBLISH_GATE_SEED` | 0 | `seed` of each request (decoding is greedy) |
 * | `SRPO_PUBLISH_GATE_CONCURRENCY` | 4 | requests in flight, at most 64 |
 * | `SRPO_PUBLISH_GATE_SERVER` | first server | the server the held-out items are sent to |
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
  const servers = urls('SRPO_PUBLISH_SERVERS', true);
  const gate = readGate(r, cwd, servers);
  return {
    kafka: readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-publish')),
    topics: { prefix: r.str('SRPO_TOPIC_PREFIX', 'srpo.') },
    servers,
    gateways: urls('SRPO_PUBLISH_GATEWAYS', false),
    policies: r.list('SRPO_PUBLISH_POLICIES', []),
    exportDir: readPublishDir(r, cwd),
    checkpointDir: readCheckpointDir(r, cwd),
    keep: r.int('SRPO_PUBLISH_KEEP', 3, { min: 1, max: 1000 }),
    serverApiKey: r.optionalStr('SRPO_PUBLISH_SERVER_API_KEY'),
    gatewayApiKey: r.optionalStr('SRPO_PUBLISH_GATEWAY_API_KEY'),
    retryMaxMs: r.int('SRPO_PUBLISH_RETRY_MAX_MS', 30_000, { min: 10 }),
    requestTimeoutMs: r.int('SRPO_PUBLISH_TIMEOUT_MS', 60_000, { min: 100 }),
    reconcileMs: r.int('SRPO_PUBLISH_RECONCILE_MS', 30_000, { min: 0 }),
    ...(metricsPort !== undefined ? { metricsPort } : {}),
    ...(gate ? { gate } : {}),
  };
}

/** `SRPO_CHECKPOINT_DIR` (default `.srpo/checkpoints`, the learner's), resolved against `cwd`. */
export function readCheckpointDir(r: EnvReader, cwd: string): string {
  return path.resolve(cwd, r.str('SRPO_CHECKPOINT_DIR', '.srpo/checkpoints'));
}

/** `SRPO_PUBLISH_DIR` (default `.srpo/published`), resolved against `cwd`. */
export function readPublishDir(r: EnvReader, cwd: string): string {
  return path.resolve(cwd, r.str('SRPO_PUBLISH_DIR', '.srpo/published'));
}

function readGate(r: EnvReader, cwd: string, servers: string[]): PublishGateConfig | undefined {
  const file = r.optionalStr('SRPO_PUBLISH_GATE_FILE');
  if (file === undefined || file === '') return undefined;
  const server = r.optionalStr('SRPO_PUBLISH_GATE_SERVER');
  if (server !== undefined && !servers.includes(server)) throw new ConfigError('SRPO_PUBLISH_GATE_SERVER', `"${server}" is not one of SRPO_PUBLISH_SERVERS`);
  return {
    file: path.resolve(cwd, file),
    margin: r.num('SRPO_PUBLISH_GATE_MARGIN', 0.02, { min: 0, max: 1 }),
    rule: r.oneOf('SRPO_PUBLISH_GATE_RULE', GATE_RULES, 'point'),
    maxItems: r.int('SRPO_PUBLISH_GATE_ITEMS', 200, { min: 1, max: HELD_OUT_LIMITS.maxItems }),
    maxTokens: r.int('SRPO_PUBLISH_GATE_MAX_TOKENS', 256, { min: 1, max: HELD_OUT_LIMITS.maxTokens }),
    seed: r.int('SRPO_PUBLISH_GATE_SEED', 0, { min: 0, max: 2 ** 31 - 1 }),
    concurrency: r.int('SRPO_PUBLISH_GATE_CONCURRENCY', 4, { min: 1, max: HELD_OUT_LIMITS.maxConcurrency }),
    ...(server !== undefined ? { server } : {}),
  };
}
