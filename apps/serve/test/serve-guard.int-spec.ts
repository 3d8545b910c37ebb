import { spawn, type ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import OpenAI from 'openai';
import { initTfBackend, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, topicCatalog } from '@srpo/events';
import { CheckpointStore, Policy } from '@srpo/policy';
import { loadHfModel } from '@srpo/hf';
import { ensureKafka, sleep } from '@srpo/testing';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const TINY = { vocabSize: 32, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 16 };
const ADMIN_KEY = 'sk-guard-admin-0123456789';
const TINY_KEY = 'sk-guard-tiny-0123456789';

interface Health {
  versions: Record<string, number>;
  tokens: number;
  cancelled: number;
  kvSlots: number;
  refusedCheckpoints: number;
}

/**
 * `srpo serve` as a process on the real broker, facing hostile input: API keys (the gateway's
 * format), a max_tokens ceiling, clients that hang up mid-generation, and PolicyVersion events
 * naming checkpoints outside the checkpoint store. Spoken to with the official `openai` client.
 */
describe('srpo serve: keys, max_tokens ceiling, disconnects and checkpoint paths', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'serve-guard-test' });
  const codec = new EventCodec();
  const prefix = `srpo.serve-guard.${Date.now()}.`;
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-serve-guard-')));
  const root = path.join(dir, 'checkpoints');
  const store = new CheckpointStore(root);
  const port = 24_000 + Math.floor(Math.random() * 1000);
  const origin = `http://127.0.0.1:${port}`;
  const admin = new OpenAI({ baseURL: `${origin}/v1`, apiKey: ADMIN_KEY, maxRetries: 0 });
  const tinyOnly = new OpenAI({ baseURL: `${origin}/v1`, apiKey: TINY_KEY, maxRetries: 0 });
  const health = async (): Promise<Health> => (await (await fetch(`${origin}/health`)).json()) as Health;
  let child: ChildProcess;
  let log = '';

  /** Polls /health until `done` holds (the server's state, not a fixed sleep). */
  async function healthUntil(done: (h: Health) => boolean, what: string, timeoutMs = 30_000): Promise<Health> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const h = await health();
      if (done(h)) return h;
      if (Date.now() > deadline) throw new Error(`${what} never happened; /health: ${JSON.stringify(h)}`);
      await sleep(20);
    }
  }

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    const kafkaAdmin = kafka.admin();
    await kafkaAdmin.connect();
    await ensureTopics(kafkaAdmin, catalog.all());
    await kafkaAdmin.disconnect();
    const hf = new Policy('qwen2', loadHfModel(QWEN2).model, 0);
    await store.save(hf);
    hf.dispose();
    const tiny = Policy.create('tiny', TINY, 5);
    await store.save(tiny);
    tiny.dispose();
    child = spawn(process.execPath, [path.join(repoRoot(), 'dist', 'apps', 'serve', 'src', 'main.js')], {
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '',
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_CHECKPOINT_DIR: root,
        SRPO_SERVE_POLICIES: 'qwen2,tiny',
        SRPO_SERVE_PORT: String(port),
        SRPO_SERVE_API_KEYS: JSON.stringify({ [ADMIN_KEY]: ['*'], [TINY_KEY]: ['tiny'] }),
        SRPO_SERVE_MAX_TOKENS: '200',
        SRPO_BACKEND: 'tensorflow',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.on('data', (d: Buffer) => (log += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (log += d.toString()));
    const deadline = Date.now() + 90_000;
    while (!/OpenAI-compatible API listening/.test(log)) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`srpo serve did not start:\n${log}`);
      await sleep(200);
    }
  }, 120_000);

  afterAll(async () => {
    child?.kill('SIGTERM');
    await new Promise((r) => (child?.exitCode !== null ? r(null) : child.once('exit', r)));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('with keys configured: 401 without or with an unknown key, 403 for a model the key is not scoped to, in OpenAI error bodies', async () => {
    const bare = await fetch(`${origin}/v1/models`);
    expect(bare.status).toBe(401);
    expect(await bare.json()).toEqual({
      error: { message: expect.stringMatching(/Authorization: Bearer/), type: 'authentication_error', param: null, code: 'missing_api_key' },
    });
    const unsigned = await fetch(`${origin}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt: '^S', max_tokens: 2 }),
    });
    expect(unsigned.status).toBe(401);
    const stranger = new OpenAI({ baseURL: `${origin}/v1`, apiKey: 'sk-guard-admin-0123456788', maxRetries: 0 });
    await expect(stranger.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    await expect(stranger.completions.create({ model: 'tiny', prompt: '^S', max_tokens: 2 })).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
    const refused = await tinyOnly.chat.completions
      .create({ model: 'qwen2', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(refused).toMatchObject({ status: 403, code: 'model_not_allowed', param: 'model' });
    // A key lists only the models it may use; the admin key lists every one.
    expect((await tinyOnly.models.list()).data.map((m) => m.id)).toEqual(['tiny']);
    expect((await admin.models.list()).data.map((m) => m.id).sort()).toEqual(['qwen2', 'tiny']);
    // The LoRA routes read a directory the caller names: an admin key only.
    const lora = await fetch(`${origin}/v1/load_lora_adapter`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TINY_KEY}` },
      body: JSON.stringify({ lora_name: 'x', lora_path: '/etc' }),
    });
    expect([lora.status, ((await lora.json()) as { error: { code: string } }).error.code]).toEqual([403, 'admin_required']);
    // Scoped and admin keys are served; /health stays open for probes.
    expect((await tinyOnly.completions.create({ model: 'tiny', prompt: '^S', max_tokens: 2 })).choices[0].text).toHaveLength(2);
    expect((await admin.chat.completions.create({ model: 'qwen2', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })).choices).toHaveLength(1);
    expect((await fetch(`${origin}/health`)).status).toBe(200);
  });

  it('refuses max_tokens above SRPO_SERVE_MAX_TOKENS with 400 naming max_tokens', async () => {
    const e = await admin.completions.create({ model: 'qwen2', prompt: 'hello', max_tokens: 201 }).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect(e).toMatchObject({ status: 400, param: 'max_tokens', message: expect.stringMatching(/at most 200/) });
    expect((await admin.completions.create({ model: 'tiny', prompt: '^S', max_tokens: 3 })).choices[0].text).toHaveLength(3);
  });

  it('a client that disconnects mid-stream frees its KV-cache slots at once; requests beside it complete', async () => {
    const long = { model: 'qwen2', prompt: 'hello', max_tokens: 200, temperature: 0 };
    // Greedy and unstopped, this choice runs all 200 tokens: only the disconnect can end it early.
    const whole = await admin.completions.create(long);
    expect([whole.choices[0].finish_reason, whole.usage?.completion_tokens]).toEqual(['length', 200]);
    const before = await healthUntil((h) => h.kvSlots === 0, 'an idle engine');
    const gone = new AbortController();
    const stream = await admin.completions.create({ ...long, stream: true }, { signal: gone.signal });
    const beside = admin.completions.create({ model: 'qwen2', prompt: 'abc', max_tokens: 60, temperature: 0 });
    let chunks = 0;
    let during: Health | undefined;
    // The client's stream ends quietly once aborted: the third chunk is the last one read.
    for await (const chunk of stream) {
      expect(chunk.choices[0].finish_reason).toBeNull();
      if (++chunks === 3) {
        during = await health();
        gone.abort();
      }
    }
    expect(chunks).toBe(3);
    expect(during?.kvSlots).toBeGreaterThan(0);
    const after = await healthUntil((h) => h.cancelled === before.cancelled + 1 && h.kvSlots === 0, 'the cancelled row leaving the batch');
    // Fewer tokens than the whole choice (200) plus the request beside it (60) were generated: the stream stopped early.
    expect(after.tokens - before.tokens).toBeLessThan(200 + 60);
    const b = await beside;
    expect([b.choices[0].finish_reason, b.usage?.completion_tokens]).toEqual(['length', 60]);
    expect((await admin.completions.create({ model: 'tiny', prompt: '^S', max_tokens: 2 })).choices[0].text).toHaveLength(2);
  });

  it('a client that disconnects before a non-streamed answer stops its generation too', async () => {
    const before = await healthUntil((h) => h.kvSlots === 0, 'an idle engine');
    const gone = new AbortController();
    const pending = admin.completions.create({ model: 'qwen2', prompt: 'hello', max_tokens: 200, temperature: 0 }, { signal: gone.signal });
    await healthUntil((h) => h.kvSlots > 0, 'the generation starting');
    gone.abort();
    await expect(pending).rejects.toBeInstanceOf(OpenAI.APIUserAbortError);
    const after = await healthUntil((h) => h.cancelled === before.cancelled + 1 && h.kvSlots === 0, 'the cancelled row leaving the batch');
    expect(after.tokens - before.tokens).toBeLessThan(200);
  });

  it('refuses PolicyVersion events naming checkpoints outside SRPO_CHECKPOINT_DIR (/etc, .., a link out), logs why, counts them, and serves on', async () => {
    // A genuine checkpoint of tiny v3, with a matching hash, but stored outside the store.
    const outsideStore = new CheckpointStore(path.join(dir, 'outside'));
    const save = async (s: CheckpointStore, version: number) => {
      const p = new Policy('tiny', Policy.create('tiny', TINY, 100 + version).model, version);
      const manifest = await s.save(p);
      p.dispose();
      return manifest.weightsHash;
    };
    const outsideHash = await save(outsideStore, 3);
    const linkedHash = await save(outsideStore, 4);
    fs.symlinkSync(outsideStore.dirFor('tiny', 4), path.join(root, 'tiny', 'v4'));
    const goodHash = await save(store, 5);
    const announce = (version: number, checkpointUri: string, weightsHash: string) => ({
      key: 'tiny',
      value: codec.encode('PolicyVersion', { policyId: 'tiny', version, weightsHash, checkpointUri, updateId: null, eventTimeMs: Date.now() }),
    });
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({
      topic: catalog.policyVersions.name,
      acks: -1,
      messages: [
        announce(1, '/etc', outsideHash),
        announce(2, `${root}/../outside/tiny/v3`, outsideHash),
        announce(3, pathToFileURL(outsideStore.dirFor('tiny', 3)).href, outsideHash),
        announce(4, pathToFileURL(path.join(root, 'tiny', 'v4')).href, linkedHash),
      ],
    });
    await healthUntil((h) => h.refusedCheckpoints === 4, 'four refusals');
    const r = await admin.completions.create({ model: 'tiny', prompt: '^W', max_tokens: 2 });
    expect(r.system_fingerprint).toBe('srpo-tiny-v0');
    const refusals = log.split('\n').filter((l) => l.includes('refused a policy version'));
    expect(refusals).toHaveLength(4);
    for (const l of refusals)
      expect(JSON.parse(l)).toMatchObject({ level: 'warn', policyId: 'tiny', reason: expect.stringMatching(/outside the checkpoint store/) });
    // A version inside the store is still followed.
    await producer.send({ topic: catalog.policyVersions.name, acks: -1, messages: [announce(5, pathToFileURL(store.dirFor('tiny', 5)).href, goodHash)] });
    await producer.disconnect();
    const deadline = Date.now() + 30_000;
    let fingerprint = '';
    while (fingerprint !== 'srpo-tiny-v5') {
      if (Date.now() > deadline) throw new Error(`version 5 never served; last ${fingerprint}`);
      fingerprint = (await admin.completions.create({ model: 'tiny', prompt: '^W', max_tokens: 1 })).system_fingerprint ?? '';
      await sleep(50);
    }
    expect((await health()).versions.tiny).toBe(5);
  });

  it('logged no key, no prompt text and no error line', () => {
    expect(log).not.toMatch(/sk-guard|hello|"level":"error"/);
    expect(log).not.toMatch(/no SRPO_SERVE_API_KEYS/);
  });

  it('without keys it stays open, and warns at boot when it listens beyond loopback', async () => {
    // A --model server needs no broker: started on every interface, then stopped.
    const open = spawn(process.execPath, [path.join(repoRoot(), 'dist', 'apps', 'serve', 'src', 'main.js')], {
      env: { PATH: process.env.PATH ?? '', SRPO_SERVE_MODEL_DIR: QWEN2, SRPO_SERVE_HOST: '0.0.0.0', SRPO_SERVE_PORT: '0', SRPO_BACKEND: 'tensorflow' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    open.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    open.stderr?.on('data', (d: Buffer) => (out += d.toString()));
    try {
      const deadline = Date.now() + 60_000;
      while (!/OpenAI-compatible API listening/.test(out)) {
        if (open.exitCode !== null || Date.now() > deadline) throw new Error(`srpo serve did not start:\n${out}`);
        await sleep(100);
      }
    } finally {
      open.kill('SIGTERM');
      await new Promise((r) => (open.exitCode !== null ? r(null) : open.once('exit', r)));
    }
    const warning = out.split('\n').find((l) => l.includes('no SRPO_SERVE_API_KEYS'));
    expect(warning && JSON.parse(warning)).toMatchObject({ level: 'warn', host: '0.0.0.0' });
  }, 90_000);
});
