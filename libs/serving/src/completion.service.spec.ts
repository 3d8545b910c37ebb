import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ErrorCode, initTfBackend, repoRoot } from '@srpo/core';
import { Policy, PolicyRegistry, SeededRng, tokenLogProbs, type CausalLm } from '@srpo/policy';
import { HfTokenizer, loadHfModel } from '@srpo/hf';
import { CompletionService } from './completion.service';
import { drawTopP, GenerationCancelled, GenerationEngine, topK } from './generation-engine';
import { parseRequest } from './openai-protocol';
import { ServedModels, type ModelLease } from './served-models';
import { SYMBOL_TEXTS, SymbolTextCodec, type TextCodec } from './text-codec';

const MODEL = { vocabSize: 32, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 16 };
const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');

async function recomputed(model: CausalLm, context: number[], response: number[], temperature: number): Promise<number[]> {
  const { logProbs, mask } = tokenLogProbs(model, [{ contextTokens: context, responseTokens: response }], { temperature });
  const out = Array.from(await logProbs.data()).slice(0, response.length);
  logProbs.dispose();
  mask.dispose();
  return out;
}

describe('sampling helpers', () => {
  it('top-k lists the most likely ids first, ties by lower id', () => {
    expect(topK([-3, -1, -2, -1, -5], 3)).toEqual([
      { id: 1, logprob: -1 },
      { id: 3, logprob: -1 },
      { id: 2, logprob: -2 },
    ]);
    expect(topK([-1, -2], 0)).toEqual([]);
  });

  it('top-p keeps the smallest most likely set reaching p: p below the top mass always draws the top token', () => {
    const logp = [Math.log(0.6), Math.log(0.3), Math.log(0.1)];
    const rng = new SeededRng(1);
    for (let i = 0; i < 50; i++) expect(drawTopP(logp, 0.5, rng)).toBe(0);
    const seen = new Set(Array.from({ length: 200 }, () => drawTopP(logp, 0.85, rng)));
    expect([...seen].sort()).toEqual([0, 1]);
  });
});

describe('completion service on native TensorFlow', () => {
  const registry = new PolicyRegistry();
  let models: ServedModels;
  let service: CompletionService;
  beforeAll(async () => {
    await initTfBackend('tensorflow');
    registry.add(new Policy('tiny', Policy.create('tiny', MODEL, 5).model, 3));
    registry.add(new Policy('qwen2', loadHfModel(QWEN2).model, 0));
    models = new ServedModels(registry);
    service = new CompletionService(models, new GenerationEngine({ maxBatchRows: 64, maxQueuedRows: 256 }));
  });
  afterAll(() => registry.dispose());

  it('completes symbol text on the project transformer; log-probs are what the learner recomputes at that temperature', async () => {
    const req = parseRequest('completions', {
      model: 'tiny',
      prompt: '^S12|',
      max_tokens: 4,
      n: 3,
      temperature: 0.7,
      logprobs: 2,
      seed: 9,
      return_token_ids: true,
    });
    const { body, result } = await service.run(req);
    expect(body).toMatchObject({ object: 'text_completion', model: 'tiny', system_fingerprint: 'srpo-tiny-v3', prompt_token_ids: [0, 13, 3, 4, 1] });
    expect(result.choices).toHaveLength(3);
    const tiny = registry.get('tiny').model;
    for (const c of result.choices) {
      expect(c.tokenIds).toHaveLength(4);
      expect(c.finishReason).toBe('length');
      expect(c.text).toBe(c.tokenIds.map((id) => SYMBOL_TEXTS[id]).join(''));
      const again = await recomputed(tiny, result.promptTokenIds, c.tokenIds, 0.7);
      c.draws.forEach((d, j) => {
        expect(Math.abs(d.logprob - again[j])).toBeLessThan(1e-5);
        expect(d.top).toHaveLength(2);
        expect(d.top[0].logprob).toBeGreaterThanOrEqual(d.top[1].logprob);
      });
    }
    const choices = body.choices as { text: string; logprobs: { tokens: string[]; token_logprobs: number[]; top_logprobs: Record<string, number>[] } }[];
    expect(choices[0].logprobs.tokens.join('')).toBe(choices[0].text);
    expect(choices[0].logprobs.token_logprobs).toEqual(result.choices[0].draws.map((d) => d.logprob));
    expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: 12, total_tokens: 17 });
  });

  it('a seed reproduces every choice; choices of one request differ in their seeds', async () => {
    const run = async () =>
      (await service.run(parseRequest('completions', { model: 'tiny', prompt: '^W', max_tokens: 8, n: 4, seed: 1 }))).result.choices.map((c) =>
        c.tokenIds.join(','),
      );
    const a = await run();
    expect(await run()).toEqual(a);
    expect(new Set(a).size).toBeGreaterThan(1);
  });

  it('temperature 0 is greedy: each token is the argmax of the recomputed distribution', async () => {
    const { result } = await service.run(parseRequest('completions', { model: 'tiny', prompt: '^Q', max_tokens: 5, temperature: 0 }));
    const tiny = registry.get('tiny').model;
    const ctx = [...result.promptTokenIds];
    for (const id of result.choices[0].tokenIds) {
      const all = await Promise.all(Array.from({ length: 32 }, (_, t) => recomputed(tiny, ctx, [t], 1)));
      const best = all.map((x) => x[0]).reduce((b, v, i, arr) => (v > arr[b] ? i : b), 0);
      expect(id).toBe(best);
      ctx.push(id);
    }
  });

  it('a stop string ends the choice with finish_reason stop, the text cut before it', async () => {
    const free = await service.run(parseRequest('completions', { model: 'tiny', prompt: '^S', max_tokens: 10, seed: 4 }));
    const text = free.result.choices[0].text;
    const stop = text[3];
    const { body } = await service.run(parseRequest('completions', { model: 'tiny', prompt: '^S', max_tokens: 10, seed: 4, stop }));
    const c = (body.choices as { text: string; finish_reason: string }[])[0];
    expect(c.finish_reason).toBe('stop');
    expect(c.text).toBe(text.slice(0, text.indexOf(stop)));
  });

  it('refuses a prompt past the context, a character outside the vocabulary, and an unknown model, in OpenAI terms', async () => {
    await expect(service.run(parseRequest('completions', { model: 'tiny', prompt: '^S12|', max_tokens: 12 }))).rejects.toMatchObject({
      status: 400,
      code: 'context_length_exceeded',
    });
    await expect(service.run(parseRequest('completions', { model: 'tiny', prompt: '^S!' }))).rejects.toMatchObject({
      status: 400,
      param: 'prompt',
      message: expect.stringMatching(/"!" at 2/),
    });
    await expect(service.run(parseRequest('completions', { model: 'gpt-4', prompt: 'x' }))).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    // Names of inherited object properties are unknown models too (the served models are Maps).
    for (const model of ['__proto__', 'constructor', 'toString']) {
      await expect(service.run(parseRequest('completions', { model, prompt: 'x' }))).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    }
    await expect(service.run(parseRequest('chat', { model: 'tiny', messages: [{ role: 'user', content: 'x' }] }))).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/no chat template/),
    });
  });

  it('batches concurrent requests: eight requests of 6 tokens take 6 steps, not 48', async () => {
    const steps0 = service.engine.totals.steps;
    const all = await Promise.all(
      Array.from({ length: 8 }, (_, i) => service.run(parseRequest('completions', { model: 'tiny', prompt: '^S', max_tokens: 6, seed: i }))),
    );
    expect(all.every((r) => r.result.choices[0].tokenIds.length === 6)).toBe(true);
    expect(service.engine.totals.steps - steps0).toBe(6);
  });

  it('chat on a Hugging Face model renders its template and streams chunks that add up to the response', async () => {
    const chunks: Record<string, unknown>[] = [];
    const req = parseRequest('chat', {
      model: 'qwen2',
      messages: [{ role: 'user', content: 'hello 12' }],
      max_tokens: 6,
      seed: 3,
      stream: true,
      stream_options: { include_usage: true },
      logprobs: true,
      top_logprobs: 1,
    });
    const { body, result } = await service.run(req, (c) => chunks.push(c));
    const text = chunks.flatMap((c) => (c.choices as { delta: { content?: string } }[]).map((ch) => ch.delta.content ?? '')).join('');
    expect(text).toBe(result.choices[0].text);
    const entries = chunks.flatMap((c) => (c.choices as { logprobs: { content: { logprob: number }[] } | null }[]).flatMap((ch) => ch.logprobs?.content ?? []));
    expect(entries.map((e) => e.logprob)).toEqual(result.choices[0].draws.map((d) => d.logprob));
    expect(chunks[chunks.length - 1]).toMatchObject({ choices: [], usage: { completion_tokens: result.choices[0].tokenIds.length } });
    expect(body.system_fingerprint).toBe('srpo-qwen2-v0');
    const hf = registry.get('qwen2').model;
    const again = await recomputed(hf, result.promptTokenIds, result.choices[0].tokenIds, 1);
    result.choices[0].draws.forEach((d, j) => expect(Math.abs(d.logprob - again[j])).toBeLessThan(1e-4));
  });

  it('a chat without max_tokens runs to the KV-cache budget where that is shorter than the context; a prompt past it is refused naming max_tokens', async () => {
    // qwen2's context is 256 tokens; the budget, 80 (the templated prompt is 50).
    const small = new CompletionService(models, new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 8, kvCacheTokens: 80 }));
    const { result } = await small.run(parseRequest('chat', { model: 'qwen2', messages: [{ role: 'user', content: 'hello 12' }], seed: 2 }));
    const [c] = result.choices;
    expect(c.finishReason).toBe('length');
    expect(result.promptTokenIds.length + c.tokenIds.length).toBe(80);
    await expect(small.run(parseRequest('chat', { model: 'qwen2', messages: [{ role: 'user', content: 'hello '.repeat(40) }] }))).rejects.toMatchObject({
      code: ErrorCode.VALIDATION_FAILED,
      field: 'max_tokens',
      message: expect.stringMatching(/over the server's budget of 80/),
    });
  });

  it('a max_tokens ceiling refuses a request above it with 400 naming max_tokens, and bounds a chat that sets none', async () => {
    const capped = new CompletionService(models, new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 8 }), { maxTokens: 5 });
    await expect(capped.run(parseRequest('completions', { model: 'tiny', prompt: '^S', max_tokens: 6 }))).rejects.toMatchObject({
      status: 400,
      param: 'max_tokens',
      message: expect.stringMatching(/max_tokens is 6; this server generates at most 5/),
    });
    const { result } = await capped.run(parseRequest('chat', { model: 'qwen2', messages: [{ role: 'user', content: 'hello 12' }], seed: 2 }));
    expect(result.choices[0].tokenIds.length).toBeLessThanOrEqual(5);
    expect((await capped.run(parseRequest('completions', { model: 'tiny', prompt: '^S', max_tokens: 5 }))).result.choices[0].tokenIds).toHaveLength(5);
  });

  it('a request whose signal aborts mid-stream stops: it rejects as cancelled, its lease ends, and the engine is left empty', async () => {
    const engine = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 8 });
    const own = new CompletionService(models, engine);
    const gone = new AbortController();
    let chunks = 0;
    const req = parseRequest('chat', { model: 'qwen2', messages: [{ role: 'user', content: 'hello 12' }], max_tokens: 100, n: 2, stream: true, seed: 4 });
    await expect(
      own.run(
        req,
        () => {
          if (++chunks === 3) gone.abort();
        },
        gone.signal,
      ),
    ).rejects.toBeInstanceOf(GenerationCancelled);
    await engine.drain();
    expect(chunks).toBeLessThan(6);
    expect([engine.totals.cancelled, engine.kvSlots, engine.inFlight(registry.get('qwen2').model)]).toEqual([2, 0, 0]);
  });

  it('a replaced version keeps serving the request that holds it and is disposed when it ends', () => {
    const old = registry.get('tiny');
    const lease = models.lease('tiny');
    registry.replace(new Policy('tiny', Policy.create('tiny', MODEL, 6).model, 4), { disposeOld: false });
    models.retire(old);
    expect(old.model.isDisposed).toBe(false);
    expect(models.lease('tiny').policy.version).toBe(4);
    expect((service.listModels().data as { id: string; srpo: { version: number } }[]).find((m) => m.id === 'tiny')?.srpo.version).toBe(4);
    lease.release();
    expect(old.model.isDisposed).toBe(true);
    expect(new SymbolTextCodec(32).decode([0, 40])).toBe('^<|t40|>');
  });
});

/**
 * A codec whose generated tokens spell a fixed script, one piece per token whatever the ids (the
 * model is random, so a real tokenizer would not spell a call): the answer's assembly from text
 * (calls parsed, deltas, finish reasons) is what is under test; the prompt still goes through the
 * model directory's own template and tokenizer.
 */
function scripted(real: TextCodec, pieces: readonly string[]): TextCodec {
  return {
    kind: 'hf',
    stopIds: [],
    encode: (text, field) => real.encode(text, field),
    chatPrompt: (messages, tools, prefill) => real.chatPrompt(messages, tools, prefill),
    decode: (ids) => pieces.slice(0, ids.length).join(''),
    tokenText: (id) => `t${id}`,
  };
}

/** Leases whose codec is {@link scripted}. */
class ScriptedModels extends ServedModels {
  pieces: readonly string[] = [];
  override lease(id: string): ModelLease {
    const lease = super.lease(id);
    return { ...lease, codec: scripted(lease.codec, this.pieces) };
  }
}

describe('completion service: tool calls (auto)', () => {
  const registry = new PolicyRegistry();
  const TOOLS_TEMPLATE =
    '{%- if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}' +
    "{%- for m in messages %}<|im_start|>{{ m.role + '\\n' + m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n";
  const tools = [{ type: 'function', function: { name: 'add', parameters: { type: 'object' } } }];
  let dir: string;
  let models: ScriptedModels;
  let service: CompletionService;
  beforeAll(async () => {
    await initTfBackend('tensorflow');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-tools-'));
    fs.cpSync(QWEN2, dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'chat_template.jinja'), TOOLS_TEMPLATE);
    registry.add(new Policy('tooled', loadHfModel(dir).model, 0));
    registry.add(new Policy('qwen2', loadHfModel(QWEN2).model, 0));
    models = new ScriptedModels(registry);
    service = new CompletionService(models, new GenerationEngine({ maxBatchRows: 16, maxQueuedRows: 64 }));
  });
  afterAll(() => {
    registry.dispose();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const CALL = ['Sure. ', '<tool_call>', '\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n', '</tool_call>'];
  const chat = (extra: Record<string, unknown> = {}) =>
    parseRequest('chat', {
      model: 'tooled',
      messages: [{ role: 'user', content: 'add 1 and 2' }],
      tools,
      seed: 1,
      return_token_ids: true,
      logprobs: true,
      ...extra,
    });

  it('answers a call as tool_calls with finish_reason tool_calls; the text before it is the content; every sampled token is kept', async () => {
    models.pieces = CALL;
    const { body, result } = await service.run(chat({ max_tokens: CALL.length }));
    const choice = (body.choices as Record<string, unknown>[])[0];
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message).toEqual({
      role: 'assistant',
      content: 'Sure. ',
      refusal: null,
      tool_calls: [{ id: expect.stringMatching(/^call_/) as unknown, type: 'function', function: { name: 'add', arguments: '{"a":1,"b":2}' } }],
    });
    // The recorder's view: all four sampled tokens and their log-probs, the call's included.
    expect(result.choices[0].tokenIds).toHaveLength(4);
    expect((choice.token_ids as number[]).length).toBe(4);
    expect(((choice.logprobs as { content: unknown[] }).content ?? []).length).toBe(4);
    // The tools reached the prompt through the template.
    const plain = await service.run(
      parseRequest('chat', { model: 'tooled', messages: [{ role: 'user', content: 'add 1 and 2' }], max_tokens: 1, return_token_ids: true }),
    );
    expect(result.promptTokenIds.length).toBeGreaterThan(plain.result.promptTokenIds.length);
  });

  it('streams the content, holds the call, and sends it whole in one last delta with finish_reason tool_calls', async () => {
    models.pieces = CALL;
    const chunks: Record<string, unknown>[] = [];
    const { result } = await service.run(chat({ max_tokens: CALL.length, stream: true }), (c) => chunks.push(c));
    type Choice = {
      delta: { content?: string; tool_calls?: { index: number; id: string; function: { name: string; arguments: string } }[] };
      finish_reason: string | null;
      token_ids?: number[];
    };
    const choices = chunks.flatMap((c) => c.choices as Choice[]);
    expect(choices.map((c) => c.delta.content ?? '').join('')).toBe('Sure. ');
    const last = choices[choices.length - 1];
    expect(last.finish_reason).toBe('tool_calls');
    expect(last.delta.tool_calls).toEqual([
      { index: 0, id: expect.stringMatching(/^call_/) as unknown, type: 'function', function: { name: 'add', arguments: '{"a":1,"b":2}' } },
    ]);
    expect(choices.flatMap((c) => c.token_ids ?? [])).toEqual(result.choices[0].tokenIds);
  });

  it('a malformed call (cut by max_tokens, or naming no tool) is answered as the text the model wrote, never an error', async () => {
    models.pieces = CALL;
    const cut = await service.run(chat({ max_tokens: 3 }));
    expect((cut.body.choices as Record<string, unknown>[])[0]).toMatchObject({
      finish_reason: 'length',
      message: { role: 'assistant', content: CALL.slice(0, 3).join('') },
    });
    models.pieces = ['<tool_call>', '{"name": "rm", "arguments": {}}', '</tool_call>'];
    const chunks: Record<string, unknown>[] = [];
    await service.run(chat({ max_tokens: 3, stream: true }), (c) => chunks.push(c));
    const choices = chunks.flatMap((c) => c.choices as { delta: { content?: string }; finish_reason: string | null }[]);
    expect(choices.map((c) => c.delta.content ?? '').join('')).toBe(models.pieces.join(''));
    expect(choices[choices.length - 1].finish_reason).toBe('length');
  });

  it('tool_choice required and a named function: the call is opened in the prompt, the model samples the rest, and it is read as a call', async () => {
    const auto = await service.run(chat({ max_tokens: 1 }));
    const tokenizer = HfTokenizer.fromDirectory(dir);
    const decodeTail = (ids: readonly number[]) => tokenizer.decode(ids.slice(auto.result.promptTokenIds.length));
    models.pieces = [' {"a": 1, "b": 2}}', '\n</tool_call>'];
    const named = await service.run(chat({ max_tokens: 2, tool_choice: { type: 'function', function: { name: 'add' } } }));
    // The prompt is the auto prompt followed by the forced opening; only the two sampled tokens are the completion.
    expect(named.result.promptTokenIds.slice(0, auto.result.promptTokenIds.length)).toEqual(auto.result.promptTokenIds);
    expect(decodeTail(named.result.promptTokenIds)).toBe('<tool_call>\n{"name": "add", "arguments":');
    expect(named.result.choices[0].tokenIds).toHaveLength(2);
    expect((named.body.choices as Record<string, unknown>[])[0]).toMatchObject({
      finish_reason: 'tool_calls',
      message: { content: null, tool_calls: [{ type: 'function', function: { name: 'add', arguments: '{"a":1,"b":2}' } }] },
    });
    models.pieces = ['{"name": "add", "arguments": {"a": 3}}\n', '</tool_call>'];
    const required = await service.run(chat({ max_tokens: 2, tool_choice: 'required' }));
    expect(decodeTail(required.result.promptTokenIds)).toBe('<tool_call>\n');
    expect((required.body.choices as Record<string, unknown>[])[0]).toMatchObject({
      finish_reason: 'tool_calls',
      message: { tool_calls: [{ function: { name: 'add', arguments: '{"a":3}' } }] },
    });
  });

  it('a forced call the model does not complete is answered as text, the forced opening first, streamed in order', async () => {
    models.pieces = ['oops', ' no', ' call'];
    const chunks: Record<string, unknown>[] = [];
    const { body } = await service.run(chat({ max_tokens: 3, tool_choice: 'required', stop: [' call'] }));
    expect((body.choices as Record<string, unknown>[])[0]).toMatchObject({ finish_reason: 'stop', message: { content: '<tool_call>\noops no' } });
    await service.run(chat({ max_tokens: 3, tool_choice: { type: 'function', function: { name: 'add' } }, stream: true }), (c) => chunks.push(c));
    const choices = chunks.flatMap((c) => c.choices as { delta: { content?: string }; finish_reason: string | null }[]);
    expect(choices.map((c) => c.delta.content ?? '').join('')).toBe('<tool_call>\n{"name": "add", "arguments":oops no call');
    expect(choices[choices.length - 1].finish_reason).toBe('length');
  });

  it('a stop string inside an offered call: the held call text goes out after the content before it, in order', async () => {
    models.pieces = CALL;
    const chunks: Record<string, unknown>[] = [];
    await service.run(chat({ max_tokens: 4, stop: ['</tool_call>'], stream: true }), (c) => chunks.push(c));
    const choices = chunks.flatMap((c) => c.choices as { delta: { content?: string }; finish_reason: string | null }[]);
    expect(choices.map((c) => c.delta.content ?? '').join('')).toBe(CALL.slice(0, 3).join(''));
    expect(choices[choices.length - 1].finish_reason).toBe('stop');
  });

  it('tool_choice none renders no tools and reads no calls; a model whose template ignores tools refuses them, naming tools', async () => {
    models.pieces = CALL;
    const none = await service.run(chat({ max_tokens: 4, tool_choice: 'none' }));
    expect((none.body.choices as Record<string, unknown>[])[0]).toMatchObject({ finish_reason: 'length', message: { content: CALL.join('') } });
    const plain = await service.run(
      parseRequest('chat', { model: 'tooled', messages: [{ role: 'user', content: 'add 1 and 2' }], max_tokens: 1, return_token_ids: true }),
    );
    expect(none.result.promptTokenIds).toEqual(plain.result.promptTokenIds);
    await expect(service.run(parseRequest('chat', { model: 'qwen2', messages: [{ role: 'user', content: 'x' }], tools, max_tokens: 1 }))).rejects.toMatchObject(
      {
        status: 400,
        param: 'tools',
        message: expect.stringMatching(/does not render tools/) as unknown,
      },
    );
  });
});
