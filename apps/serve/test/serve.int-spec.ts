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
import { ensureKafka, runCommand, sleep } from '@srpo/testing';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const TINY = { vocabSize: 32, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 16 };

const python = (args: string[]): Promise<string> => runCommand('python3', args);

/** Per-token log-probs from transformers (scripts/reference/score_hf.py): the reference, not our code. */
async function transformersLogprobs(cases: { promptTokenIds: number[]; responseTokenIds: number[] }[]): Promise<number[][]> {
  const file = path.join(os.tmpdir(), `serve-cases-${process.pid}.json`);
  fs.writeFileSync(file, JSON.stringify(cases));
  return JSON.parse(await python([path.join(repoRoot(), 'scripts', 'reference', 'score_hf.py'), QWEN2, file])) as number[][];
}

/**
 * `srpo serve` as a process on the real broker, talked to only with the official `openai`
 * clients (npm here, Python in the last test). It serves two policies: the Qwen2 fixture (a
 * Hugging Face model, chat template) and a project transformer (symbol text, completions).
 */
describe('srpo serve with the official openai clients', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'serve-test' });
  const codec = new EventCodec();
  const prefix = `srpo.serve-test.${Date.now()}.`;
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-serve-'));
  const store = new CheckpointStore(path.join(dir, 'checkpoints'));
  const port = 23_000 + Math.floor(Math.random() * 1000);
  const baseURL = `http://127.0.0.1:${port}/v1`;
  const client = new OpenAI({ baseURL, apiKey: 'not-checked', maxRetries: 0 });
  let child: ChildProcess;
  let log = '';

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
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
        SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
        SRPO_SERVE_POLICIES: 'qwen2,tiny',
        SRPO_SERVE_PORT: String(port),
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
  });

  it('lists the served policies as models', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['qwen2', 'tiny']);
  });

  it("chat completion with n = 3 and log-probs; each token's log-prob agrees with transformers within 1e-4", async () => {
    const { data, response } = await client.chat.completions
      .create({
        model: 'qwen2',
        messages: [{ role: 'user', content: 'add 12 and 30' }],
        n: 3,
        max_tokens: 6,
        seed: 7,
        logprobs: true,
        top_logprobs: 2,
        return_token_ids: true,
      } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
      .withResponse();
    expect(response.headers.get('x-srpo-policy-version')).toBe('qwen2@0');
    expect(data.system_fingerprint).toBe('srpo-qwen2-v0');
    expect(data.choices).toHaveLength(3);
    const extra = data as unknown as { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };
    const cases = extra.choices.map((c) => ({ promptTokenIds: extra.prompt_token_ids, responseTokenIds: c.token_ids }));
    const reference = await transformersLogprobs(cases);
    data.choices.forEach((c, i) => {
      const content = c.logprobs?.content ?? [];
      expect(content).toHaveLength(cases[i].responseTokenIds.length);
      content.forEach((t, j) => {
        expect(Math.abs(t.logprob - reference[i][j])).toBeLessThan(1e-4);
        expect(t.top_logprobs).toHaveLength(2);
        expect(t.top_logprobs[0].logprob).toBeGreaterThanOrEqual(t.top_logprobs[1].logprob);
      });
      expect(['stop', 'length']).toContain(c.finish_reason);
    });
    expect(data.usage?.completion_tokens).toBe(cases.reduce((a, c) => a + c.responseTokenIds.length, 0));
    expect(data.usage?.prompt_tokens).toBe(extra.prompt_token_ids.length);
  });

  it('streams the same completion a seed gives without streaming, chunk by chunk, with usage last', async () => {
    const params = { model: 'qwen2', messages: [{ role: 'user' as const, content: 'hello' }], max_tokens: 8, seed: 3, logprobs: true };
    const whole = await client.chat.completions.create(params);
    const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    let text = '';
    const logprobs: number[] = [];
    let usage: OpenAI.CompletionUsage | undefined | null;
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        text += c.delta.content ?? '';
        for (const t of c.logprobs?.content ?? []) logprobs.push(t.logprob);
        finish = c.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(whole.choices[0].message.content);
    expect(logprobs).toEqual((whole.choices[0].logprobs?.content ?? []).map((t) => t.logprob));
    expect(finish).toBe(whole.choices[0].finish_reason);
    expect(usage).toEqual(whole.usage);
  });

  it('legacy completions on the project transformer speak its symbol text', async () => {
    const r = await client.completions.create({ model: 'tiny', prompt: '^S12|', max_tokens: 3, n: 2, logprobs: 1, temperature: 0.8 });
    expect(r.choices).toHaveLength(2);
    for (const c of r.choices) {
      expect(c.text).toMatch(/^[\^|0-7YN_SCWRAQa-dp-u>=~]{3}$/);
      expect(c.logprobs?.tokens?.join('')).toBe(c.text);
      expect(c.logprobs?.token_logprobs?.every((lp) => lp <= 0)).toBe(true);
    }
    expect(r.system_fingerprint).toBe('srpo-tiny-v0');
  });

  it("refuses bad requests in OpenAI's error shape, which the client raises as its typed errors", async () => {
    await expect(client.completions.create({ model: 'gpt-4o', prompt: 'x' })).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    await expect(client.completions.create({ model: 'tiny', prompt: '^S', max_tokens: -1 })).rejects.toMatchObject({ status: 400, param: 'max_tokens' });
    await expect(
      client.chat.completions.create({ model: 'qwen2', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'f' } }] }),
    ).rejects.toMatchObject({ status: 400, param: 'tools', message: expect.stringMatching(/chat template does not render tools/) as unknown });
    await expect(client.completions.create({ model: 'tiny', prompt: '^S12|', max_tokens: 15 })).rejects.toMatchObject({
      status: 400,
      code: 'context_length_exceeded',
    });
    const e = await client.completions
      .create({ model: 'tiny', prompt: 'x', frobnicate: 1 } as OpenAI.CompletionCreateParamsNonStreaming)
      .catch((err: unknown) => err);
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect((e as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(/Unrecognized request argument supplied: frobnicate/);
  });

  it('follows policy-versions: a new checkpoint serves the next requests, and requests sent during the switch all complete', async () => {
    const v1 = Policy.create('tiny', TINY, 77);
    const next = new Policy('tiny', v1.model, 1);
    const manifest = await store.save(next);
    next.dispose();
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({
      topic: catalog.policyVersions.name,
      acks: -1,
      messages: [
        {
          key: 'tiny',
          value: codec.encode('PolicyVersion', {
            policyId: 'tiny',
            version: 1,
            weightsHash: manifest.weightsHash,
            checkpointUri: pathToFileURL(store.dirFor('tiny', 1)).href,
            updateId: null,
            eventTimeMs: Date.now(),
          }),
        },
      ],
    });
    await producer.disconnect();
    const seen = new Set<string>();
    const deadline = Date.now() + 60_000;
    while (!seen.has('srpo-tiny-v1')) {
      if (Date.now() > deadline) throw new Error(`version 1 never served; saw ${[...seen].join(', ')}`);
      const burst = await Promise.all(Array.from({ length: 6 }, () => client.completions.create({ model: 'tiny', prompt: '^W', max_tokens: 4 })));
      for (const r of burst) {
        expect(r.choices[0].text).toHaveLength(4);
        seen.add(r.system_fingerprint ?? '');
      }
    }
    expect([...seen].every((f) => f === 'srpo-tiny-v0' || f === 'srpo-tiny-v1')).toBe(true);
    const after = await client.completions.create({ model: 'tiny', prompt: '^W', max_tokens: 2 });
    expect(after.system_fingerprint).toBe('srpo-tiny-v1');
  });

  it('the Python openai client streams chat and completions with n > 1 and log-probs', async () => {
    const out = JSON.parse(await python([path.join(__dirname, 'openai_client_check.py'), baseURL])) as {
      models: string[];
      streamText: string;
      wholeText: string;
      streamLogprobs: number[];
      wholeLogprobs: number[];
      completionChoices: number;
      completionTokens: number[];
    };
    expect(out.models).toEqual(['qwen2', 'tiny']);
    expect(out.streamText).toBe(out.wholeText);
    expect(out.streamLogprobs).toEqual(out.wholeLogprobs);
    expect(out.completionChoices).toBe(3);
    expect(out.completionTokens).toEqual([2, 2, 2]);
  });

  it('logged no prompt or completion text and no error line', () => {
    expect(log).not.toMatch(/add 12 and 30|"level":"error"/);
  });
});
