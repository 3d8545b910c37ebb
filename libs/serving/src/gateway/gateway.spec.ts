import { createHash } from 'crypto';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { HfTokenizer } from '@srpo/hf';
import { ApiKeys } from './api-keys';
import { policyVersionOf, recordedOutputs, replyOf, StreamAccumulator, upstreamCompletionOf, type RecordContext } from './completion-record';
import { episodeFieldsOf, outputIdOf } from './episode-fields';
import { hfRetokenizer } from './retokenizer';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const fields = { episodeId: 'ep', step: 2, role: 'worker', agentId: 'w1' };
const ctx = (patch: Partial<RecordContext> = {}): RecordContext => ({
  fields,
  policyId: 'actor',
  policyVersion: 4,
  requestBody: {},
  temperature: 0.8,
  maxTokens: 3,
  startedAtMs: 10,
  finishedAtMs: 20,
  ...patch,
});

describe('episode fields', () => {
  it('come from the X-SRPO-* headers, else from metadata; the header wins', () => {
    expect(episodeFieldsOf({ 'x-srpo-episode': 'e', 'x-srpo-step': '3', 'x-srpo-role': 'r', 'x-srpo-agent': 'a' }, { srpo_episode: 'other' }, true)).toEqual({
      episodeId: 'e',
      step: 3,
      role: 'r',
      agentId: 'a',
    });
    expect(episodeFieldsOf({ 'x-srpo-step': '0' }, { srpo_episode: 'm', srpo_role: 'r', srpo_agent: 'a' }, true)).toEqual({
      episodeId: 'm',
      step: 0,
      role: 'r',
      agentId: 'a',
    });
  });

  it('are all or nothing: none is refused in strict mode only, a partial set always, a bad step always', () => {
    expect(episodeFieldsOf({}, {}, false)).toBeUndefined();
    expect(() => episodeFieldsOf({}, {}, true)).toThrow(/X-SRPO-Episode: missing/);
    expect(() => episodeFieldsOf({ 'x-srpo-episode': 'e' }, {}, false)).toThrow(/X-SRPO-Step: missing/);
    expect(() => episodeFieldsOf({ 'x-srpo-episode': 'e', 'x-srpo-step': '-1', 'x-srpo-role': 'r', 'x-srpo-agent': 'a' }, {}, true)).toThrow(
      /X-SRPO-Step: must be a non-negative integer/,
    );
  });

  it('give one output id per choice and turn', () => {
    expect(outputIdOf(fields, 0, 1)).toBe('ep.s2.w1');
    expect(outputIdOf(fields, 1, 3)).toBe('ep.s2.w1.c1');
    expect(outputIdOf(fields, 1, 3, 2)).toBe('ep.s2.w1.t2.c1');
  });

  it('take the data subject from X-SRPO-Subject, else metadata.srpo_subject, bounded; the recorded outputs carry it', () => {
    const h = { 'x-srpo-episode': 'e', 'x-srpo-step': '3', 'x-srpo-role': 'r', 'x-srpo-agent': 'a' };
    expect(episodeFieldsOf({ ...h, 'x-srpo-subject': 'user-7' }, { srpo_subject: 'other' }, true)?.subjectId).toBe('user-7');
    expect(episodeFieldsOf(h, { srpo_subject: 'user-8' }, true)?.subjectId).toBe('user-8');
    expect(episodeFieldsOf(h, {}, true)?.subjectId).toBeUndefined();
    expect(() => episodeFieldsOf({ ...h, 'x-srpo-subject': 'u'.repeat(300) }, {}, true)).toThrow(/X-SRPO-Subject: is 300 characters/);
    const chat = {
      prompt_token_ids: [1],
      choices: [{ index: 0, message: { content: 'a' }, token_ids: [5], logprobs: { content: [{ token: 'a', logprob: -1 }] } }],
    };
    expect(recordedOutputs(upstreamCompletionOf(chat), ctx({ fields: { ...fields, subjectId: 'user-7' } }))[0].subjectId).toBe('user-7');
    expect(recordedOutputs(upstreamCompletionOf(chat), ctx())[0].subjectId).toBeNull();
  });

  it('take a turn and parent the client names, bounded', () => {
    const h = { 'x-srpo-episode': 'e', 'x-srpo-step': '3', 'x-srpo-role': 'r', 'x-srpo-agent': 'a' };
    expect(episodeFieldsOf({ ...h, 'x-srpo-turn': '2', 'x-srpo-parent-output': 'e.s3.a.t1' }, {}, true)).toMatchObject({
      turn: 2,
      parentOutputId: 'e.s3.a.t1',
    });
    expect(() => episodeFieldsOf({ ...h, 'x-srpo-turn': 'two' }, {}, true)).toThrow(/X-SRPO-Turn: must be an integer/);
    expect(() => episodeFieldsOf({ ...h, 'x-srpo-parent-output': 'p'.repeat(300) }, {}, true)).toThrow(/X-SRPO-Parent-Output: is 300 characters/);
  });
});

describe('API keys', () => {
  const keys = ApiKeys.parse(JSON.stringify({ 'sk-aaaaaaaaaaaaaaaa': ['actor'], 'sk-admin-aaaaaaaaaa': ['*'] }), 'SRPO_GATEWAY_API_KEYS');
  it('401 without or with an unknown key, 403 for a policy the key may not use', () => {
    expect(() => keys.authorize(undefined, 'actor')).toThrow(expect.objectContaining({ status: 401, code: 'missing_api_key' }));
    expect(() => keys.authorize('Bearer sk-nope-aaaaaaaaaaaa', 'actor')).toThrow(expect.objectContaining({ status: 401, code: 'invalid_api_key' }));
    expect(() => keys.authorize('Bearer sk-aaaaaaaaaaaaaaaa', 'judge')).toThrow(expect.objectContaining({ status: 403 }));
    expect(() => keys.authorize('Bearer sk-aaaaaaaaaaaaaaaa', 'actor')).not.toThrow();
    expect(() => keys.authorize('Bearer sk-admin-aaaaaaaaaa', 'judge')).not.toThrow();
    expect(() => ApiKeys.open().authorize(undefined, 'x')).not.toThrow();
  });
  it('admin routes (the served-models a publisher sets) take only a ["*"] key', () => {
    expect(() => keys.authorizeAdmin('Bearer sk-aaaaaaaaaaaaaaaa')).toThrow(expect.objectContaining({ status: 403, code: 'admin_required' }));
    expect(() => keys.authorizeAdmin(undefined)).toThrow(expect.objectContaining({ status: 401 }));
    expect(() => keys.authorizeAdmin('Bearer sk-admin-aaaaaaaaaa')).not.toThrow();
    expect(() => ApiKeys.open().authorizeAdmin(undefined)).not.toThrow();
  });
  it('refuses malformed key files naming the variable, and a key by its position and id, never by any of its characters', () => {
    expect(() => ApiKeys.parse('{', 'V')).toThrow(/^V: is not valid JSON/);
    const message = (json: string) => {
      try {
        ApiKeys.parse(json, 'V');
      } catch (e) {
        return (e as Error).message;
      }
      return 'accepted';
    };
    expect(message('{"ZqXw": ["a"]}')).toMatch(/^V: key #1 \(key-[0-9a-f]{8}\) is shorter than 16 characters$/);
    expect(message('{"sk-bbbbbbbbbbbbbbbb": ["a"], "ZqXwVuTsRqPoNmLk-1": []}')).toMatch(/^V: key #2 \(key-[0-9a-f]{8}\) must map to a non-empty list/);
    expect(message('{"ZqXw": ["a"]}')).not.toMatch(/Zq/);
  });

  it('no refusal carries a key or a part of one', () => {
    const messages = [
      () => ApiKeys.parse('{"skXY": ["a"]}', 'V'),
      () => ApiKeys.parse('{"skXYaaaaaaaaaaaaaa": []}', 'V'),
      () => keys.authorize('Bearer skXY-aaaaaaaaaaaa', 'actor'),
      () => keys.authorize('Bearer sk-aaaaaaaaaaaaaaaa', 'judge'),
    ].map((f) => {
      try {
        f();
      } catch (e) {
        return (e as Error).message;
      }
      return 'accepted';
    });
    expect(messages).toHaveLength(4);
    for (const m of messages) expect(m).not.toMatch(/skXY|sk-a|accepted/);
  });
  it('takes only the exact key: not a prefix, an extension or another case of it', () => {
    for (const near of ['sk-aaaaaaaaaaaaaaa', 'sk-aaaaaaaaaaaaaaaaa', 'SK-AAAAAAAAAAAAAAAA', 'sk-aaaaaaaaaaaaaaab'])
      expect(() => keys.authorize(`Bearer ${near}`, 'actor')).toThrow(expect.objectContaining({ status: 401, code: 'invalid_api_key' }));
  });

  it('keeps only digests: a key works given plain or as sha256:<hex>, and is known by an id from its hash', () => {
    const plain = 'sk-cccccccccccccccc';
    const digest = createHash('sha256').update(plain).digest('hex');
    const hashed = ApiKeys.parse(JSON.stringify({ [`sha256:${digest}`]: ['actor'] }), 'V');
    expect(hashed.authorize(`Bearer ${plain}`, 'actor')).toEqual({ id: `key-${digest.slice(0, 8)}`, policies: new Set(['actor']) });
    expect(() => hashed.authorize(`Bearer sha256:${digest}`, 'actor')).toThrow(expect.objectContaining({ status: 401 }));
    expect(keys.ids).toHaveLength(2);
    expect(keys.authorize('Bearer sk-admin-aaaaaaaaaa', undefined)?.id).toBe(keys.ids[1]);
    expect(() => ApiKeys.parse(JSON.stringify({ [plain]: ['a'], [`sha256:${digest}`]: ['b'] }), 'V')).toThrow(/key #2 \(key-[0-9a-f]{8}\) is given twice/);
    // The key itself is kept nowhere in the object.
    expect(JSON.stringify(hashed)).not.toContain(plain);
    expect(JSON.stringify(keys)).not.toContain('sk-aaaa');
  });
});

describe('recorded outputs', () => {
  const chat = {
    system_fingerprint: 'srpo-actor-v7',
    prompt_token_ids: [1, 2, 3],
    choices: [
      {
        index: 0,
        message: { content: 'ab' },
        token_ids: [5, 6],
        logprobs: {
          content: [
            { token: 'a', logprob: -0.5 },
            { token: 'b', logprob: 1e-8 },
          ],
        },
      },
    ],
  };

  it('one AgentOutput per choice from the upstream ids and log-probs (a float32 hair above 0 clamped)', () => {
    const [o] = recordedOutputs(upstreamCompletionOf(chat), ctx());
    expect(o).toMatchObject({
      outputId: 'ep.s2.w1',
      contextTokenIds: [1, 2, 3],
      responseTokenIds: [5, 6],
      behaviourLogProbs: [-0.5, 0],
      lossMask: [true, true],
      policyId: 'actor',
      policyVersion: 4,
      tokenIdOrigin: 'sampled',
      startedAtMs: 10,
      eventTimeMs: 20,
    });
    expect(o.sampling).toEqual({ temperature: 0.8, topK: 0, maxNewTokens: 3, seed: null, stopTokenIds: [] });
    expect(o.contextRef).toMatch(/^ctx:[0-9a-f]{16}$/);
  });

  it("reads vLLM's token_id:N log-prob tokens when no token_ids come back", () => {
    const up = upstreamCompletionOf({
      prompt_token_ids: [9],
      choices: [{ text: 'x', logprobs: { tokens: ['token_id:41', 'token_id:7'], token_logprobs: [-1, -2] } }],
    });
    expect(recordedOutputs(up, ctx())[0].responseTokenIds).toEqual([41, 7]);
  });

  it('refuses an upstream without log-probs, without ids (no tokenizer), or with counts that disagree', () => {
    expect(() => recordedOutputs(upstreamCompletionOf({ prompt_token_ids: [1], choices: [{ text: 'a', token_ids: [3], logprobs: null }] }), ctx())).toThrow(
      expect.objectContaining({ status: 502, code: 'upstream_no_logprobs' }),
    );
    expect(() => recordedOutputs(upstreamCompletionOf({ choices: [{ text: 'a', logprobs: { tokens: ['a'], token_logprobs: [-1] } }] }), ctx())).toThrow(
      expect.objectContaining({ code: 'upstream_no_token_ids' }),
    );
    expect(() =>
      recordedOutputs(
        upstreamCompletionOf({ prompt_token_ids: [1], choices: [{ text: 'a', token_ids: [3, 4], logprobs: { tokens: ['a'], token_logprobs: [-1] } }] }),
        ctx(),
      ),
    ).toThrow(expect.objectContaining({ code: 'upstream_token_mismatch' }));
  });

  it("re-tokenizes text with the model's tokenizer where the upstream gives none, and says so", () => {
    const tok = HfTokenizer.fromDirectory(QWEN2);
    const ids = tok.encode('hello 12');
    const up = upstreamCompletionOf({ choices: [{ message: { content: 'hello 12' }, logprobs: { content: ids.map(() => ({ token: '?', logprob: -1 })) } }] });
    const body = { messages: [{ role: 'user', content: 'hi' }] };
    const [o] = recordedOutputs(up, ctx({ requestBody: body, retokenizer: hfRetokenizer(QWEN2) }));
    expect(o.tokenIdOrigin).toBe('retokenized');
    expect(o.responseTokenIds).toEqual(ids);
    expect(o.contextTokenIds).toEqual(tok.encode(tok.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true })));
  });

  it('folds streamed chunks: text, log-probs and ids per choice, prompt ids from the first chunk', () => {
    const acc = new StreamAccumulator();
    acc.add({
      system_fingerprint: 'fp',
      prompt_token_ids: [1],
      choices: [{ index: 1, delta: { content: 'a' }, token_ids: [4], logprobs: { content: [{ token: 'a', logprob: -1 }] } }],
    });
    acc.add({ choices: [{ index: 0, delta: { content: 'z' }, token_ids: [9], logprobs: { content: [{ token: 'z', logprob: -3 }] } }] });
    acc.add({ choices: [{ index: 1, delta: { content: 'b' }, token_ids: [5], logprobs: { content: [{ token: 'b', logprob: -2 }] } }] });
    acc.add({ choices: [{ index: 1, delta: {}, finish_reason: 'stop' }] });
    const r = acc.result();
    expect(r.promptTokenIds).toEqual([1]);
    expect(r.choices.map((c) => [c.index, c.text, c.tokenIds, c.logprobs])).toEqual([
      [0, 'z', [9], [-3]],
      [1, 'ab', [4, 5], [-1, -2]],
    ]);
  });

  // vLLM's answer to a chat with tools and its hermes parser: the call moved out of content, every sampled token still in token_ids and logprobs.
  const vllmToolAnswer = {
    prompt_token_ids: [1, 2, 3],
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'chatcmpl-tool-1', type: 'function', function: { name: 'add', arguments: '{"a": 1}' } }],
        },
        token_ids: [7, 8, 9],
        logprobs: { content: [-0.1, -0.2, -0.3].map((logprob, i) => ({ token: `t${i}`, logprob })) },
        finish_reason: 'tool_calls',
      },
    ],
  };

  it("records a tool-call answer (vLLM's shape, content null) as every token the upstream sampled, with its log-probs", () => {
    const [o] = recordedOutputs(upstreamCompletionOf(vllmToolAnswer), ctx());
    expect([o.contextTokenIds, o.responseTokenIds, o.behaviourLogProbs, o.tokenIdOrigin]).toEqual([[1, 2, 3], [7, 8, 9], [-0.1, -0.2, -0.3], 'sampled']);
  });

  it('folds a streamed tool-call answer (tool_calls deltas, ids and log-probs per chunk) into the same record', () => {
    const acc = new StreamAccumulator();
    acc.add({
      prompt_token_ids: [1, 2, 3],
      choices: [{ index: 0, delta: { role: 'assistant' }, token_ids: [7], logprobs: { content: [{ token: 't0', logprob: -0.1 }] } }],
    });
    acc.add({
      choices: [
        {
          index: 0,
          delta: { tool_calls: [{ index: 0, id: 'c', type: 'function', function: { name: 'add', arguments: '' } }] },
          token_ids: [8],
          logprobs: { content: [{ token: 't1', logprob: -0.2 }] },
        },
      ],
    });
    acc.add({
      choices: [
        {
          index: 0,
          delta: { tool_calls: [{ index: 0, function: { arguments: '{"a": 1}' } }] },
          token_ids: [9],
          logprobs: { content: [{ token: 't2', logprob: -0.3 }] },
        },
      ],
    });
    acc.add({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] });
    const [o] = recordedOutputs(acc.result(), ctx());
    expect([o.responseTokenIds, o.behaviourLogProbs]).toEqual([
      [7, 8, 9],
      [-0.1, -0.2, -0.3],
    ]);
    // The call as a later turn echoes it: name once, arguments from their pieces.
    expect(replyOf(acc.result().choices[0])).toEqual({ content: '', calls: [{ name: 'add', arguments: '{"a": 1}' }] });
    expect(o.malformedToolCall).toBe(false);
  });

  it('flags a choice that offered tools and came back as text holding a call opening (a malformed call), and nothing else', () => {
    const text = (content: string) => ({ ...chat, choices: [{ ...chat.choices[0], message: { content } }] });
    const tools = [{ type: 'function', function: { name: 'add' } }];
    const flag = (content: string, body: Record<string, unknown>) =>
      recordedOutputs(upstreamCompletionOf(text(content)), ctx({ requestBody: body }))[0].malformedToolCall;
    expect(flag('<tool_call>\n{"name": "add", "arguments": {', { tools })).toBe(true);
    expect(flag('no call here', { tools })).toBe(false);
    expect(flag('<tool_call>', { tools, tool_choice: 'none' })).toBe(false);
    expect(flag('<tool_call>', {})).toBe(false);
    expect(recordedOutputs(upstreamCompletionOf(vllmToolAnswer), ctx({ requestBody: { tools } }))[0].malformedToolCall).toBe(false);
  });

  it('records a later turn with its number in the id, its parent, and whether its context kept the parent as sampled', () => {
    // The prompt is [1, 2, 3]: it holds a parent that saw [1, 2] and sampled [3, end], not one that sampled [2, 9, end].
    const parent = { outputId: 'ep.s2.w1', contextTokenIds: Int32Array.from([1, 2]), responseTokenIds: Int32Array.from([3, 9]) };
    const [kept] = recordedOutputs(upstreamCompletionOf(chat), ctx({ place: { turn: 1, parent } }));
    expect([kept.outputId, kept.turn, kept.parentOutputId, kept.tokenDrift]).toEqual(['ep.s2.w1.t1', 1, 'ep.s2.w1', false]);
    const other = { ...parent, contextTokenIds: Int32Array.from([1]), responseTokenIds: Int32Array.from([2, 9, 4]) };
    const [drifted] = recordedOutputs(upstreamCompletionOf(chat), ctx({ place: { turn: 2, parent: other } }));
    expect([drifted.outputId, drifted.tokenDrift]).toEqual(['ep.s2.w1.t2', true]);
    const [unchecked] = recordedOutputs(upstreamCompletionOf(chat), ctx({ place: { turn: 3, parentOutputId: 'gone' } }));
    expect([unchecked.parentOutputId, unchecked.tokenDrift]).toEqual(['gone', null]);
    const [first] = recordedOutputs(upstreamCompletionOf(chat), ctx());
    expect([first.outputId, first.turn, first.parentOutputId, first.tokenDrift]).toEqual(['ep.s2.w1', 0, null, null]);
  });

  it('refuses a tool-call answer without token ids even with a tokenizer: its sampled text is gone, re-tokenizing would record made-up tokens', () => {
    const { prompt_token_ids: _, ...noIds } = vllmToolAnswer;
    const up = upstreamCompletionOf({ ...noIds, choices: noIds.choices.map(({ token_ids: __, ...c }) => c) });
    expect(() => recordedOutputs(up, ctx({ requestBody: { messages: [{ role: 'user', content: 'hi' }] }, retokenizer: hfRetokenizer(QWEN2) }))).toThrow(
      expect.objectContaining({ status: 502, code: 'upstream_no_token_ids', message: expect.stringMatching(/tool calls and no token ids/) as unknown }),
    );
  });

  it('takes the version from the header, else the fingerprint, else the configured fallback, else refuses', () => {
    expect(policyVersionOf('actor', 'actor@3', 'srpo-actor-v9')).toBe(3);
    expect(policyVersionOf('actor', undefined, 'srpo-actor-v9')).toBe(9);
    expect(policyVersionOf('actor', 'judge@1', 'vllm-abc', () => 5)).toBe(5);
    expect(() => policyVersionOf('actor', undefined, 'fp_44709d6fcb')).toThrow(expect.objectContaining({ status: 502, code: 'upstream_no_version' }));
  });
});
