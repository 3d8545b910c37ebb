import * as http from 'http';
import * as path from 'path';
import type { AddressInfo } from 'net';
import { repoRoot } from '@srpo/core';
import { AgentEventsProducer, createKafka, type AgentEvent, type AgentOutput } from '@srpo/events';
import { HfTextCodec } from '../text-codec';
import { ApiKeys } from './api-keys';
import { CompletionGateway, type Responder } from './completion-gateway';
import { ChatChunkTranslator, tokenPromptOf } from './token-prompt';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const codec = HfTextCodec.fromDirectory(QWEN2);
const user = (content: string) => ({ role: 'user' as const, content });
const M0 = [user('say hello')];
const M1 = [...M0, { role: 'assistant' as const, content: 'Hello world' }, user('again')];
/** The end token the template writes after an answer (one of the model's end tokens). */
const END = codec.stopIds.find((t) => codec.chatPrompt(M1).includes(t)) as number;
/** "Hello world" one character per token: text the tokenizer would write with 8 tokens, sampled as 11. */
const SPELLED = [...'Hello world'].flatMap((ch) => codec.encode(ch));

describe('token prompts', () => {
  it('rebuild exactly the prompt the template gives when the parent was sampled as the tokenizer writes it', () => {
    const parent = {
      outputId: 'p',
      contextTokenIds: Int32Array.from(codec.chatPrompt(M0)),
      responseTokenIds: Int32Array.from([...codec.encode('Hello world'), END]),
    };
    expect(tokenPromptOf(codec, { model: 'm', messages: M1 }, parent)?.ids).toEqual(codec.chatPrompt(M1));
    // Cut by length (no end token sampled): the template's end of turn follows the sampled tokens.
    const cut = { ...parent, responseTokenIds: Int32Array.from(codec.encode('Hello world')) };
    expect(tokenPromptOf(codec, { model: 'm', messages: M1 }, cut)?.ids).toEqual(codec.chatPrompt(M1));
  });

  it("put the parent's sampled tokens where the template would re-tokenize its text, the rest as the template writes it", () => {
    const context = codec.chatPrompt(M0);
    const parent = { outputId: 'p', contextTokenIds: Int32Array.from(context), responseTokenIds: Int32Array.from([...SPELLED, END]) };
    const ids = tokenPromptOf(codec, { model: 'm', messages: M1 }, parent)?.ids ?? [];
    const plain = codec.chatPrompt(M1);
    const tail = plain.length - (context.length + codec.encode('Hello world').length + 1);
    expect(ids).toEqual([...context, ...SPELLED, END, ...plain.slice(plain.length - tail)]);
  });

  it('are not used where they cannot be exact: forced tool choice, log-probs asked for, no assistant message, a request serve refuses', () => {
    const parent = { outputId: 'p', contextTokenIds: Int32Array.from([1]), responseTokenIds: Int32Array.from([END]) };
    expect(tokenPromptOf(codec, { model: 'm', messages: M1, logprobs: true }, parent)).toBeUndefined();
    expect(tokenPromptOf(codec, { model: 'm', messages: M0 }, parent)).toBeUndefined();
    expect(tokenPromptOf(codec, { model: 'm', messages: M1, response_format: { type: 'json_object' } }, parent)).toBeUndefined();
    const tools = [{ type: 'function', function: { name: 'add' } }];
    expect(tokenPromptOf(codec, { model: 'm', messages: M1, tools, tool_choice: 'required' }, parent)).toBeUndefined();
  });

  it('stream text as chat deltas, holding a call until its choice finishes', () => {
    const tools = [{ type: 'function' as const, function: { name: 'add' } }];
    const t = new ChatChunkTranslator({ ids: [], tools, parallelToolCalls: true });
    const chunk = (text: string, finish: string | null = null) => ({ id: 'cmpl-1', choices: [{ index: 0, text, finish_reason: finish }] });
    const deltas = [chunk('Sure. <tool'), chunk('_call>{"name": "add", "arguments": {}}'), chunk('</tool_call>', 'stop')].map(
      (c) => (t.translate(c).choices as { delta: Record<string, unknown>; finish_reason: unknown }[])[0],
    );
    expect(deltas.map((d) => d.delta.content ?? null)).toEqual(['Sure. ', null, null]);
    expect(deltas[0].delta.role).toBe('assistant');
    expect(deltas[2]).toMatchObject({
      finish_reason: 'tool_calls',
      delta: { tool_calls: [{ index: 0, type: 'function', function: { name: 'add', arguments: '{}' } }] },
    });
    expect(t.answer(0)?.toolCalls?.[0].function.name).toBe('add');
  });
});

/**
 * A real HTTP upstream in vLLM's shape over the fixture's tokenizer: a chat prompt is tokenized
 * from its text (the template, as vLLM does), a token prompt is taken as sent. Turn 0's answer
 * comes back sampled as {@link SPELLED}: the same text, other ids than the tokenizer writes.
 */
function scriptedUpstream(): Promise<{ url: string; seen: { path: string; body: Record<string, unknown> }[]; close: () => Promise<void> }> {
  const seen: { path: string; body: Record<string, unknown> }[] = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d: Buffer) => (raw += d.toString()));
    req.on('end', () => {
      const body = JSON.parse(raw) as Record<string, unknown>;
      seen.push({ path: req.url ?? '', body });
      const chat = Array.isArray(body.messages);
      const prompt = chat ? codec.chatPrompt(body.messages as { role: string; content: string }[]) : (body.prompt as number[]);
      const ids = [...SPELLED, END];
      const logprobs = ids.map(() => -0.5);
      const choice = chat
        ? {
            index: 0,
            message: { role: 'assistant', content: 'Hello world' },
            token_ids: ids,
            logprobs: { content: ids.map((i) => ({ token: `t${i}`, logprob: -0.5 })) },
            finish_reason: 'stop',
          }
        : { index: 0, text: 'Hello world', token_ids: ids, logprobs: { tokens: ids.map((i) => `t${i}`), token_logprobs: logprobs }, finish_reason: 'stop' };
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          id: 'cmpl-1',
          object: chat ? 'chat.completion' : 'text_completion',
          model: 'm',
          system_fingerprint: 'srpo-actor-v3',
          prompt_token_ids: prompt,
          choices: [choice],
        }),
      );
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, seen, close: () => new Promise((r) => server.close(() => r())) }),
    ),
  );
}

describe('completion gateway: a later turn whose parent re-tokenizes differently', () => {
  const headers = { 'x-srpo-episode': 'ep', 'x-srpo-step': '0', 'x-srpo-role': 'solver', 'x-srpo-agent': 'a' };
  const run = async (tokenPrompts: boolean) => {
    const up = await scriptedUpstream();
    const sdk = new AgentEventsProducer({ kafka: createKafka({ brokers: ['127.0.0.1:1'], clientId: 'unused' }) });
    const written: AgentOutput[] = [];
    // The events as the SDK would write them (validated there); Kafka itself is the broker tests' part.
    jest.spyOn(sdk, 'emitBatch').mockImplementation((events: AgentEvent[]) => {
      for (const e of events) if (e.type === 'AgentOutput') written.push(e.value as AgentOutput);
      return Promise.resolve([]);
    });
    const gw = new CompletionGateway({
      upstreamUrl: up.url,
      upstreamTokenIds: true,
      strict: true,
      keys: ApiKeys.open(),
      sdk,
      upstreamTimeoutMs: 5000,
      maxInFlight: 4,
      recordTimeoutMs: 1000,
      ...(tokenPrompts ? { tokenPrompts: codec } : {}),
    });
    const replies: Record<string, unknown>[] = [];
    const out: Responder = {
      json: (_s, b) => void replies.push(b as Record<string, unknown>),
      startStream: () => undefined,
      write: async () => undefined,
      end: () => undefined,
    };
    try {
      await gw.complete('chat', headers, { model: 'actor', messages: M0, temperature: 1 }, out);
      await gw.complete('chat', headers, { model: 'actor', messages: M1, temperature: 1 }, out);
    } finally {
      await up.close();
    }
    return { written, seen: up.seen, replies, stats: gw.stats() };
  };

  it('sent as text: the drift is recorded on the turn and counted', async () => {
    const { written, seen, stats } = await run(false);
    expect(seen.map((s) => s.path)).toEqual(['/v1/chat/completions', '/v1/chat/completions']);
    expect(written.map((o) => [o.outputId, o.turn, o.parentOutputId, o.tokenDrift])).toEqual([
      ['ep.s0.a', 0, null, null],
      ['ep.s0.a.t1', 1, 'ep.s0.a', true],
    ]);
    expect([stats.turnsLinked, stats.tokenDrift, stats.tokenPrompts]).toEqual([1, 1, 0]);
  });

  it('sent as a token prompt: the context holds the parent as sampled, no drift, and the agent still gets a chat answer', async () => {
    const { written, seen, replies, stats } = await run(true);
    expect(seen.map((s) => s.path)).toEqual(['/v1/chat/completions', '/v1/completions']);
    const prompt = seen[1].body.prompt as number[];
    const first = written[0];
    expect(prompt.slice(0, first.contextTokenIds.length + first.responseTokenIds.length)).toEqual([...first.contextTokenIds, ...first.responseTokenIds]);
    expect(written[1]).toMatchObject({ outputId: 'ep.s0.a.t1', parentOutputId: 'ep.s0.a', tokenDrift: false, contextTokenIds: prompt });
    expect([stats.tokenDrift, stats.tokenPrompts]).toEqual([0, 1]);
    expect(replies[1]).toMatchObject({
      id: 'chatcmpl-1',
      object: 'chat.completion',
      choices: [{ message: { role: 'assistant', content: 'Hello world' }, finish_reason: 'stop', logprobs: null }],
    });
    expect((replies[1].choices as Record<string, unknown>[])[0].token_ids).toBeUndefined();
  });
});
