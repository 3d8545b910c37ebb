import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import * as tf from '@tensorflow/tfjs';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { initTfBackend, MetricsSink, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, type AgentOutput, type PolicyVersion } from '@srpo/events';
import { CheckpointStore, Policy, SeededRng } from '@srpo/policy';
import { attachLora, loadHfModel, type LoraAdapter } from '@srpo/hf';
import {
  answerMatches,
  exportLoraVersion,
  followPolicyVersions,
  JsonlHeldOutEvaluator,
  Publisher,
  readDecisions,
  readPin,
  type PublishDecision,
} from '@srpo/serving';
import { ensureKafka, sleep } from '@srpo/testing';
import { bootstrap as serveApp } from '../apps/serve/src/main';
import { bootstrap as gatewayApp } from '../apps/gateway/src/main';
import { loadCliConfig } from '../apps/cli/src/cli-config';
import { publishCommand } from '../apps/cli/src/commands/publish.command';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const ADMIN = 'sk-admin-gate-test';
const AGENT = 'sk-agent-gate-test';
const PROMPTS = ['hello', 'what is 2 + 2?', 'name a colour', 'count to three', 'say yes', 'the sky is', 'a b c', 'ok', 'tell me a word', 'why?'];

async function until(what: string, ok: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/**
 * The publishing gate on the real broker, with `srpo serve --model` (in-process) as the server
 * and `srpo gateway` (in-process) in front of it. Two adapters of the tiny fixture: "good"
 * (small seeded factors) and "bad" (large ones, which change its greedy replies). The held-out
 * file is made from the good adapter's greedy replies on prompts where the bad one answers
 * otherwise, so on it the good adapter scores k/k and the bad one 0/k.
 */
describe('publisher gate: a worse version is refused and recorded, a rollback is one command', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'publish-gate-test' });
  const codec = new EventCodec();
  const prefix = `srpo.publish-gate-test.${Date.now()}.`;
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-publish-gate-'));
  const exportDir = path.join(tmp, 'published');
  const store = new CheckpointStore(path.join(tmp, 'checkpoints'));
  const metrics = new MetricsSink();
  let serve: NestExpressApplication;
  let gateway: NestExpressApplication;
  let serveUrl: string;
  let gatewayUrl: string;
  let publisher: Publisher;
  let follower: { stop: () => Promise<void> };
  let model: ReturnType<typeof loadHfModel>['model'];
  let adapter: LoraAdapter;
  let items = 0;
  const events = new Map<number, PolicyVersion>();

  /** Saves version v of LoRA policy `actor` with the good or the bad factors. */
  async function save(v: number, kind: 'good' | 'bad'): Promise<PolicyVersion> {
    const rng = new SeededRng(kind === 'good' ? 11 : 22);
    for (const [, variable] of adapter.weights) {
      const data = Float32Array.from(rng.normalArray(variable.size, kind === 'good' ? 0.05 : 3));
      tf.tidy(() => variable.assign(tf.tensor(data, variable.shape)));
    }
    const manifest = await store.save(new Policy('actor', model, v));
    const event: PolicyVersion = {
      policyId: 'actor',
      version: v,
      weightsHash: manifest.weightsHash,
      checkpointUri: pathToFileURL(store.dirFor('actor', v)).href,
      updateId: null,
      eventTimeMs: Date.now(),
    };
    events.set(v, event);
    return event;
  }

  async function announce(event: PolicyVersion): Promise<void> {
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: catalog.policyVersions.name, acks: -1, messages: [{ key: 'actor', value: codec.encode('PolicyVersion', event) }] });
    await producer.disconnect();
  }

  const post = (url: string, body: unknown, key?: string) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify(body),
    });

  async function greedy(name: string, prompt: string): Promise<string> {
    const r = await post(`${serveUrl}/v1/chat/completions`, {
      model: name,
      messages: [{ role: 'user', content: prompt }],
      temperature: 0,
      seed: 0,
      max_tokens: 6,
    });
    expect(r.status).toBe(200);
    return ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content;
  }

  const servedOnServe = async (): Promise<string[]> =>
    ((await (await fetch(`${serveUrl}/v1/models`)).json()) as { data: { id: string }[] }).data.map((m) => m.id).filter((id) => id.startsWith('actor@'));

  const gatewayServes = async (): Promise<{ model: string; version: number } | undefined> => {
    const r = await fetch(`${gatewayUrl}/v1/srpo/served-models`, { headers: { authorization: `Bearer ${ADMIN}` } });
    const body = (await r.json()) as { data: { policy_id: string; model: string; version: number }[] };
    const d = body.data.find((x) => x.policy_id === 'actor');
    return d ? { model: d.model, version: d.version } : undefined;
  };

  const decisions = (): PublishDecision[] => readDecisions(exportDir);

  const cli = (args: string[]) =>
    publishCommand(() => loadCliConfig({ SRPO_BACKEND: 'tensorflow' }), {
      SRPO_PUBLISH_GATEWAY_API_KEY: ADMIN,
      SRPO_CHECKPOINT_DIR: store.root,
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
    })
      .exitOverride()
      .parseAsync(args, { from: 'user' });

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    model = loadHfModel(QWEN2).model;
    adapter = attachLora(model, { r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj'] }, { seed: 3 });
    serve = await serveApp({
      SRPO_SERVE_MODEL_DIR: QWEN2,
      SRPO_SERVE_PORT: '0',
      SRPO_SERVE_MAX_LORAS: '8',
      SRPO_BACKEND: 'tensorflow',
      SRPO_LOG_LEVEL: 'warn',
    });
    serveUrl = `http://127.0.0.1:${(serve.getHttpServer().address() as { port: number }).port}`;
    gateway = await gatewayApp({
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_GATEWAY_UPSTREAM: `${serveUrl}/v1`,
      SRPO_GATEWAY_PORT: '0',
      SRPO_GATEWAY_API_KEYS: JSON.stringify({ [AGENT]: ['actor'], [ADMIN]: ['*'] }),
      SRPO_LOG_LEVEL: 'warn',
    });
    gatewayUrl = `http://127.0.0.1:${(gateway.getHttpServer().address() as { port: number }).port}`;

    // The held-out file: the good adapter's greedy replies where the bad one's differ.
    const probes = path.join(tmp, 'probes');
    const good = await exportLoraVersion(await save(1, 'good'), probes, store.root);
    const bad = await exportLoraVersion(await save(2, 'bad'), probes, store.root);
    expect((await post(`${serveUrl}/v1/load_lora_adapter`, { lora_name: 'probe-good', lora_path: good })).status).toBe(200);
    expect((await post(`${serveUrl}/v1/load_lora_adapter`, { lora_name: 'probe-bad', lora_path: bad })).status).toBe(200);
    const lines: string[] = [];
    for (const prompt of PROMPTS) {
      const [g, b] = [await greedy('probe-good', prompt), await greedy('probe-bad', prompt)];
      if (answerMatches(g, g) && !answerMatches(b, g)) lines.push(JSON.stringify({ messages: [{ role: 'user', content: prompt }], answer: g }));
    }
    items = lines.length;
    expect(items).toBeGreaterThanOrEqual(5);
    const heldOut = path.join(tmp, 'held-out.jsonl');
    fs.writeFileSync(heldOut, lines.join('\n') + '\n');
    for (const n of ['probe-good', 'probe-bad']) await post(`${serveUrl}/v1/unload_lora_adapter`, { lora_name: n });

    publisher = new Publisher({
      servers: [serveUrl],
      gateways: [gatewayUrl],
      exportDir,
      checkpointDir: store.root,
      keep: 3,
      gatewayApiKey: ADMIN,
      retry: { initialDelayMs: 50, maxDelayMs: 200 },
      reconcileMs: 0,
      gate: { evaluator: new JsonlHeldOutEvaluator(heldOut, { maxItems: 50, maxTokens: 6, seed: 0, concurrency: 2 }), margin: 0.1, rule: 'point' },
      metrics,
    });
    follower = await followPolicyVersions({ kafka, catalog, policies: ['actor'], onVersion: (v) => publisher.offer(v) });
  }, 180_000);

  afterAll(async () => {
    await follower?.stop();
    await publisher?.stop();
    await gateway?.close();
    await serve?.close();
    model?.dispose();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('the first version is accepted with nothing to compare with', async () => {
    await announce(events.get(1) as PolicyVersion);
    await until('the gateway serves v1', async () => (await gatewayServes())?.version === 1);
    expect(decisions().map((d) => [d.version, d.decision, d.reason])).toEqual([[1, 'accepted', 'nothing served yet to compare with']]);
  }, 60_000);

  it('a worse version is refused: recorded with its figures, counted, unloaded, and the gateway keeps the serving version', async () => {
    await announce(events.get(2) as PolicyVersion);
    await until('v2 decided', () => decisions().length === 2, 90_000);
    await publisher.idle();
    const d = decisions()[1];
    expect(d).toMatchObject({
      version: 2,
      model: 'actor@v2',
      decision: 'refused',
      serving: { version: 1, model: 'actor@v1' },
      candidateResult: { successes: 0, trials: items },
      servingResult: { successes: items, trials: items },
      difference: -1,
      margin: 0.1,
      rule: 'point',
    });
    expect(d.interval?.[1]).toBeLessThan(0);
    expect(await metrics.value('publish/gate_refused', { policy: 'actor' })).toBe(1);
    expect(await servedOnServe()).toEqual(['actor@v1']);
    expect(await gatewayServes()).toEqual({ model: 'actor@v1', version: 1 });
  }, 120_000);

  it('a version as good as the serving one is accepted and the gateway switches', async () => {
    await announce(await save(3, 'good'));
    await until('the gateway serves v3', async () => (await gatewayServes())?.version === 3, 90_000);
    expect(decisions()[2]).toMatchObject({
      version: 3,
      decision: 'accepted',
      candidateResult: { successes: items, trials: items },
      servingResult: { successes: items, trials: items },
      difference: 0,
    });
    expect(await metrics.value('publish/gate_accepted', { policy: 'actor' })).toBe(2);
  }, 120_000);

  it('`srpo publish rollback --to actor@v1` re-exports and loads v1, switches the gateway, pins it, and the publisher keeps it', async () => {
    await publisher.idle();
    fs.rmSync(path.join(exportDir, 'actor', 'v1'), { recursive: true }); // exported again from the checkpoint the topic names
    await post(`${serveUrl}/v1/unload_lora_adapter`, { lora_name: 'actor@v1' });
    await cli(['rollback', '--to', 'actor@v1', '--servers', serveUrl, '--gateways', gatewayUrl, '--dir', exportDir]);
    expect(await gatewayServes()).toEqual({ model: 'actor@v1', version: 1 });
    expect(await servedOnServe()).toContain('actor@v1');
    expect(readPin(exportDir, 'actor')?.version).toBe(1);
    expect(decisions().at(-1)).toMatchObject({ version: 1, decision: 'rollback' });
    // The publisher, at its next round, does not switch back.
    await publisher.reconcile();
    await publisher.idle();
    expect(await gatewayServes()).toEqual({ model: 'actor@v1', version: 1 });
    expect(publisher.servingVersion('actor')).toBe(1);
    // A completion through the gateway is recorded as v1.
    const res = await fetch(`${gatewayUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${AGENT}`,
        'x-srpo-episode': 'ep-rollback',
        'x-srpo-step': '0',
        'x-srpo-role': 'solver',
        'x-srpo-agent': 'solver-0',
      },
      body: JSON.stringify({ model: 'actor', messages: [{ role: 'user', content: 'hi' }], temperature: 1, max_tokens: 3 }),
    });
    expect(res.status).toBe(200);
    const outputs = (await readTopicsToEnd(kafka, [catalog.agentOutputs.name]))
      .map((r) => codec.decodeAs('AgentOutput', r.value))
      .filter((o: AgentOutput) => o.episodeId === 'ep-rollback');
    expect(outputs.map((o) => [o.policyId, o.policyVersion])).toEqual([['actor', 1]]);
  }, 120_000);

  it('while pinned a worse version is refused against the pinned one; after unpin a good one passes and switches', async () => {
    await announce(await save(4, 'bad'));
    await until('v4 decided', () => decisions().some((d) => d.version === 4), 90_000);
    await publisher.idle();
    expect(decisions().find((d) => d.version === 4)).toMatchObject({ decision: 'refused', serving: { version: 1 } });
    expect(readPin(exportDir, 'actor')?.version).toBe(1);
    expect(await gatewayServes()).toEqual({ model: 'actor@v1', version: 1 });
    await cli(['unpin', '--policy', 'actor', '--dir', exportDir]);
    expect(readPin(exportDir, 'actor')).toBeUndefined();
    await publisher.reconcile();
    await publisher.idle();
    expect(await gatewayServes()).toEqual({ model: 'actor@v1', version: 1 }); // unpinning alone switches nothing
    await announce(await save(5, 'good'));
    await until('the gateway serves v5', async () => (await gatewayServes())?.version === 5, 90_000);
    expect(decisions().at(-1)).toMatchObject({ version: 5, decision: 'accepted', serving: { version: 1 } });
    await publisher.idle();
    expect((await servedOnServe()).includes('actor@v4')).toBe(false);
  }, 180_000);

  it('a restarted publisher reads decisions.jsonl back: a version refused before is not loaded again, and the serving one is known', async () => {
    await publisher.idle();
    const again = new Publisher({
      servers: [serveUrl],
      gateways: [gatewayUrl],
      exportDir,
      checkpointDir: store.root,
      keep: 3,
      gatewayApiKey: ADMIN,
      retry: { initialDelayMs: 50, maxDelayMs: 200 },
      reconcileMs: 0,
      metrics: new MetricsSink(), // no gate: a version not refused before would simply be accepted
    });
    try {
      expect(again.servingVersion('actor')).toBe(5);
      const before = decisions().length;
      again.offer(events.get(4) as PolicyVersion);
      await again.idle();
      expect((await servedOnServe()).includes('actor@v4')).toBe(false);
      expect(await gatewayServes()).toEqual({ model: 'actor@v5', version: 5 });
      expect(decisions().length).toBe(before);
    } finally {
      await again.stop();
    }
  }, 60_000);
});
