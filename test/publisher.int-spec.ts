import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import * as tf from '@tensorflow/tfjs';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { initTfBackend, MetricsSink, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, type AgentOutput, type PolicyVersion } from '@srpo/events';
import { CheckpointStore, Policy, SeededRng } from '@srpo/policy';
import { attachLora, loadHfModel, readSafetensorsHeader, readSafetensorsTensor, type LoraAdapter } from '@srpo/hf';
import { followPolicyVersions, Publisher } from '@srpo/serving';
import { ensureKafka, sleep } from '@srpo/testing';
import { bootstrap as serveApp } from '../apps/serve/src/main';
import { bootstrap as gatewayApp } from '../apps/gateway/src/main';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const ADMIN = 'sk-admin-publisher-test';
const AGENT = 'sk-agent-publisher-test';

/**
 * A test double of an external vLLM server (`vllm serve --enable-lora` with
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), speaking its request and response shapes
 * (serving_models.py, api_server.py): the LoRA endpoints, `/v1/models` with the loaded
 * adapters, and chat completions with log-probs and token ids but no policy version.
 */
class VllmStandIn {
  readonly loras = new Map<string, string>();
  readonly calls: { route: string; body: Record<string, unknown> }[] = [];
  readonly completionModels: string[] = [];
  private server?: http.Server;

  async listen(port = 0): Promise<number> {
    this.server = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (d: Buffer) => (raw += d.toString()));
      req.on('end', () => this.answer(req.method ?? '', req.url ?? '', raw, res));
    });
    await new Promise<void>((resolve) => this.server?.listen(port, '127.0.0.1', resolve));
    return (this.server.address() as { port: number }).port;
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      if (!this.server) return resolve();
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  private answer(method: string, url: string, raw: string, res: http.ServerResponse): void {
    const body = raw ? (JSON.parse(raw) as Record<string, unknown>) : {};
    const error = (status: number, type: string, message: string) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message, type, param: null, code: status } }));
    };
    const text = (message: string) => {
      res.writeHead(200);
      res.end(message);
    };
    if (method === 'GET' && url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          object: 'list',
          data: [{ id: 'base-model', object: 'model' }, ...[...this.loras.keys()].map((id) => ({ id, object: 'model', parent: 'base-model' }))],
        }),
      );
      return;
    }
    if (method === 'POST' && url === '/v1/load_lora_adapter') {
      this.calls.push({ route: 'load', body });
      const name = body.lora_name as string | undefined;
      const dir = body.lora_path as string | undefined;
      if (!name || !dir) return error(400, 'InvalidUserInput', "Both 'lora_name' and 'lora_path' must be provided.");
      if (this.loras.has(name)) return error(400, 'InvalidUserInput', `The lora adapter '${name}' has already been loaded.`);
      if (!fs.existsSync(path.join(dir, 'adapter_config.json')) || !fs.existsSync(path.join(dir, 'adapter_model.safetensors')))
        return error(404, 'NotFoundError', `No adapter found for ${dir}`);
      this.loras.set(name, dir);
      return text(`Success: LoRA adapter '${name}' added successfully.`);
    }
    if (method === 'POST' && url === '/v1/unload_lora_adapter') {
      this.calls.push({ route: 'unload', body });
      const name = body.lora_name as string;
      if (!this.loras.delete(name)) return error(404, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
      return text(`Success: LoRA adapter '${name}' removed successfully.`);
    }
    if (method === 'POST' && url === '/v1/chat/completions') {
      const model = body.model as string;
      this.completionModels.push(model);
      if (!this.loras.has(model)) return error(404, 'NotFoundError', `The model \`${model}\` does not exist.`);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'chatcmpl-standin',
          object: 'chat.completion',
          created: 1,
          model,
          prompt_token_ids: [1, 2, 3],
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: 'ab' },
              logprobs: { content: [5, 6].map((id) => ({ token: `t${id}`, logprob: -0.5, bytes: [116], top_logprobs: [] })) },
              finish_reason: 'stop',
              token_ids: [5, 6],
            },
          ],
          usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
        }),
      );
      return;
    }
    error(404, 'NotFoundError', `no route ${method} ${url}`);
  }
}

/** A port nothing listens on (yet). */
async function freePort(): Promise<number> {
  const s = http.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function until(what: string, ok: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/**
 * The publisher on the real broker: it follows policy-versions and hands each LoRA version to
 * `srpo serve --model` (in-process), to a stand-in vLLM and to a server that is down at first,
 * then tells `srpo gateway` (in-process, in front of the stand-in) which served name is current;
 * the gateway's recorded AgentOutput carries that version with no SRPO_GATEWAY_VERSION.
 */
describe('publisher: versions reach srpo serve, vLLM and the gateway by themselves', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'publisher-test' });
  const codec = new EventCodec();
  const prefix = `srpo.publisher-test.${Date.now()}.`;
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-publisher-'));
  const store = new CheckpointStore(path.join(tmp, 'checkpoints'));
  const vllm = new VllmStandIn();
  const late = new VllmStandIn();
  const metrics = new MetricsSink();
  let serve: NestExpressApplication;
  let gateway: NestExpressApplication;
  let serveUrl: string;
  let vllmUrl: string;
  let lateUrl: string;
  let latePort: number;
  let gatewayUrl: string;
  let publisher: Publisher;
  let follower: { stop: () => Promise<void> };
  let model: ReturnType<typeof loadHfModel>['model'];
  let adapter: LoraAdapter;
  /** The factor values of each version, as the learner would have trained them. */
  const factors = new Map<number, Map<string, Float32Array>>();
  const announced = new Map<number, PolicyVersion>();

  /** Saves version v of the LoRA policy `actor` with seeded factors and announces it. */
  async function announce(v: number): Promise<void> {
    const rng = new SeededRng(1000 + v);
    const values = new Map<string, Float32Array>();
    for (const [name, variable] of adapter.weights) {
      const data = Float32Array.from(rng.normalArray(variable.size, 0.05));
      tf.tidy(() => variable.assign(tf.tensor(data, variable.shape)));
      values.set(name, data);
    }
    factors.set(v, values);
    const manifest = await store.save(new Policy('actor', model, v));
    const event: PolicyVersion = {
      policyId: 'actor',
      version: v,
      weightsHash: manifest.weightsHash,
      checkpointUri: pathToFileURL(store.dirFor('actor', v)).href,
      updateId: null,
      eventTimeMs: Date.now(),
    };
    announced.set(v, event);
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: catalog.policyVersions.name, acks: -1, messages: [{ key: 'actor', value: codec.encode('PolicyVersion', event) }] });
    await producer.disconnect();
  }

  const served = async (url: string): Promise<string[]> =>
    ((await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] }).data.map((m) => m.id).filter((id) => id.startsWith('actor@'));

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
      SRPO_SERVE_MAX_LORAS: '4',
      SRPO_BACKEND: 'tensorflow',
      SRPO_LOG_LEVEL: 'warn',
    });
    serveUrl = `http://127.0.0.1:${(serve.getHttpServer().address() as { port: number }).port}`;
    vllmUrl = `http://127.0.0.1:${await vllm.listen()}`;
    latePort = await freePort();
    lateUrl = `http://127.0.0.1:${latePort}`;
    gateway = await gatewayApp({
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_GATEWAY_UPSTREAM: `${vllmUrl}/v1`,
      SRPO_GATEWAY_PORT: '0',
      SRPO_GATEWAY_API_KEYS: JSON.stringify({ [AGENT]: ['actor'], [ADMIN]: ['*'] }),
      SRPO_LOG_LEVEL: 'warn',
    });
    gatewayUrl = `http://127.0.0.1:${(gateway.getHttpServer().address() as { port: number }).port}`;
    publisher = new Publisher({
      servers: [serveUrl, `${vllmUrl}/v1`, lateUrl],
      gateways: [gatewayUrl],
      exportDir: path.join(tmp, 'published'),
      checkpointDir: store.root,
      keep: 2,
      gatewayApiKey: ADMIN,
      retry: { initialDelayMs: 50, maxDelayMs: 200 },
      // Reconciled by hand below, so that nothing happens on a timer mid-test.
      reconcileMs: 0,
      metrics,
    });
    follower = await followPolicyVersions({ kafka, catalog, policies: ['actor'], onVersion: (v) => publisher.offer(v) });
  }, 120_000);

  afterAll(async () => {
    await follower?.stop();
    await publisher?.stop();
    await gateway?.close();
    await serve?.close();
    await vllm.close();
    await late.close();
    model?.dispose();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('loads v1 on the servers that are up, retries and reports the one that is down, and switches the gateway only once every server has it', async () => {
    await announce(1);
    await until('actor@v1 on srpo serve and the stand-in', async () => (await served(serveUrl)).includes('actor@v1') && vllm.loras.has('actor@v1'));
    await until('failures of the down server reported', async () => (await metrics.value('publish/load_failures', { target: lateUrl })) >= 3);
    const down = publisher.status().find((s) => s.server === lateUrl);
    expect(down?.loaded).toEqual({});
    expect(down?.lastError).toMatch(/unreachable/);
    expect(publisher.toldVersion(gatewayUrl, 'actor')).toBeUndefined();
    // The exported adapter holds exactly v1's factors, under peft's keys.
    const dir = vllm.loras.get('actor@v1') as string;
    const header = readSafetensorsHeader(path.join(dir, 'adapter_model.safetensors'));
    for (const [name, values] of factors.get(1) as Map<string, Float32Array>) expect(readSafetensorsTensor(header, name)).toEqual(values);
    // The server comes up: the retrier reaches it, and then the gateway is told.
    await late.listen(latePort);
    await until('the gateway told v1', () => publisher.toldVersion(gatewayUrl, 'actor') === 1);
    expect(late.loras.has('actor@v1')).toBe(true);
  }, 90_000);

  it('each new version is loaded everywhere, versions beyond the newest 2 unloaded, and the gateway follows', async () => {
    await announce(2);
    await until('the gateway told v2', () => publisher.toldVersion(gatewayUrl, 'actor') === 2);
    await announce(3);
    await until('the gateway told v3', () => publisher.toldVersion(gatewayUrl, 'actor') === 3);
    await publisher.idle();
    expect((await served(serveUrl)).sort()).toEqual(['actor@v2', 'actor@v3']);
    expect([...vllm.loras.keys()].sort()).toEqual(['actor@v2', 'actor@v3']);
    expect([...late.loras.keys()].sort()).toEqual(['actor@v2', 'actor@v3']);
    expect(vllm.calls.filter((c) => c.route === 'unload').map((c) => c.body)).toEqual([{ lora_name: 'actor@v1' }]);
    // srpo serve answers the new version under its name, reporting it.
    const r = await fetch(`${serveUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'actor@v3', prompt: 'hi', max_tokens: 2 }),
    });
    expect(r.headers.get('x-srpo-policy-version')).toBe('actor@3');
  }, 90_000);

  it('a server that lost its adapters (a restart) gets the current one again at the next reconcile', async () => {
    vllm.loras.clear();
    await publisher.reconcile();
    await until('actor@v3 loaded again on the stand-in', () => vllm.loras.has('actor@v3'));
    expect(await metrics.value('publish/reloads', { server: vllmUrl })).toBe(1);
    expect(late.loras.has('actor@v3')).toBe(true);
  }, 60_000);

  it('the gateway sends a policy to its current served name and records that version, with no SRPO_GATEWAY_VERSION', async () => {
    const agentSet = await fetch(`${gatewayUrl}/v1/srpo/served-models`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${AGENT}` },
      body: JSON.stringify({ policy_id: 'actor', model: 'actor@v1', version: 1 }),
    });
    expect(agentSet.status).toBe(403);
    const res = await fetch(`${gatewayUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${AGENT}`,
        'x-srpo-episode': 'ep-pub',
        'x-srpo-step': '0',
        'x-srpo-role': 'solver',
        'x-srpo-agent': 'solver-0',
      },
      body: JSON.stringify({ model: 'actor', messages: [{ role: 'user', content: 'hi' }], temperature: 1 }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { srpo: { policy_version: number; output_ids: string[] } };
    expect(body.srpo.policy_version).toBe(3);
    expect(vllm.completionModels.at(-1)).toBe('actor@v3');
    const records = await readTopicsToEnd(kafka, [catalog.agentOutputs.name]);
    const outputs = records.map((r) => codec.decodeAs('AgentOutput', r.value)).filter((o: AgentOutput) => o.episodeId === 'ep-pub');
    expect(outputs.map((o) => [o.outputId, o.policyId, o.policyVersion])).toEqual([[body.srpo.output_ids[0], 'actor', 3]]);
  }, 60_000);

  it('never unloads the version a gateway still sends requests to, whatever --keep says; it goes once the gateway moved on', async () => {
    const a = new VllmStandIn();
    const b = new VllmStandIn();
    const aUrl = `http://127.0.0.1:${await a.listen()}`;
    const bPort = await b.listen();
    const bUrl = `http://127.0.0.1:${bPort}`;
    const strict = new Publisher({
      servers: [aUrl, bUrl],
      gateways: [gatewayUrl],
      // Its own directory: the first publisher's decisions.jsonl (v3 accepted) would make v3 this one's serving version.
      exportDir: path.join(tmp, 'published-strict'),
      checkpointDir: store.root,
      keep: 1,
      gatewayApiKey: ADMIN,
      retry: { initialDelayMs: 50, maxDelayMs: 200 },
      reconcileMs: 0,
      metrics: new MetricsSink(),
    });
    try {
      strict.offer(announced.get(1) as PolicyVersion);
      await until('the gateway told v1', () => strict.toldVersion(gatewayUrl, 'actor') === 1);
      await b.close();
      strict.offer(announced.get(2) as PolicyVersion);
      await until('v2 on the server that is up', () => a.loras.has('actor@v2'));
      await until('the down server retried', () => (strict.status().find((s) => s.server === bUrl)?.failures ?? 0) >= 2);
      // keep 1 would drop v1, but the gateway still sends actor there: it stays.
      expect([...a.loras.keys()].sort()).toEqual(['actor@v1', 'actor@v2']);
      expect(strict.toldVersion(gatewayUrl, 'actor')).toBe(1);
      await b.listen(bPort);
      await until('the gateway told v2', () => strict.toldVersion(gatewayUrl, 'actor') === 2);
      await strict.idle();
      expect([...a.loras.keys()]).toEqual(['actor@v2']);
      expect([...b.loras.keys()]).toEqual(['actor@v2']);
    } finally {
      await strict.stop();
      await a.close();
      await b.close();
    }
  }, 60_000);

  it('a full-weight version is skipped and reported: nothing is loaded for it', async () => {
    const judge = new Policy('judge', loadHfModel(QWEN2).model, 1);
    const manifest = await store.save(judge);
    judge.dispose();
    const offered = publisher.offer({
      policyId: 'judge',
      version: 1,
      weightsHash: manifest.weightsHash,
      checkpointUri: pathToFileURL(store.dirFor('judge', 1)).href,
      updateId: null,
      eventTimeMs: Date.now(),
    });
    expect(offered).toBe(true);
    await until('the skip counted', async () => (await metrics.value('publish/skipped_full_weight', { policy: 'judge' })) === 1);
    await publisher.idle();
    expect([...vllm.loras.keys()].some((n) => n.startsWith('judge'))).toBe(false);
    expect(fs.existsSync(path.join(tmp, 'published', 'judge'))).toBe(false);
  }, 60_000);
});
