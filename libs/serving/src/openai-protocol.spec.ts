import { OpenAiError, parseRequest } from './openai-protocol';

function refusal(endpoint: 'chat' | 'completions', body: unknown): OpenAiError {
  try {
    parseRequest(endpoint, body);
  } catch (e) {
    if (e instanceof OpenAiError) return e;
    throw e;
  }
  throw new Error('accepted');
}

const TOOL = { type: 'function', function: { name: 'add', description: 'a + b', parameters: { type: 'object', properties: { a: { type: 'number' } } } } };

describe('OpenAI request parsing', () => {
  it('applies OpenAI defaults: n 1, temperature 1, top_p 1, 16 tokens for completions, the rest of the context for chat', () => {
    const c = parseRequest('completions', { model: 'actor', prompt: '^S12|' });
    expect(c).toMatchObject({
      model: 'actor',
      prompt: { text: '^S12|' },
      n: 1,
      temperature: 1,
      topP: 1,
      maxTokens: 16,
      stop: [],
      stream: false,
      logprobs: false,
      topLogprobs: 0,
    });
    const chat = parseRequest('chat', { model: 'actor', messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.maxTokens).toBeUndefined();
    expect(chat.prompt).toEqual({ messages: [{ role: 'user', content: 'hi' }] });
  });

  it('reads every supported parameter', () => {
    const r = parseRequest('chat', {
      model: 'm',
      messages: [
        {
          role: 'system',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
      ],
      n: 3,
      max_completion_tokens: 7,
      max_tokens: 99,
      temperature: 0.5,
      top_p: 0.9,
      seed: 11,
      stop: ['\n', 'END'],
      stream: true,
      stream_options: { include_usage: true },
      logprobs: true,
      top_logprobs: 4,
      metadata: { episode: 'e1' },
      return_token_ids: true,
      frequency_penalty: 0,
      user: 'u',
    });
    expect(r).toMatchObject({
      n: 3,
      maxTokens: 7,
      temperature: 0.5,
      topP: 0.9,
      seed: 11,
      stop: ['\n', 'END'],
      stream: true,
      includeUsage: true,
      logprobs: true,
      topLogprobs: 4,
      metadata: { episode: 'e1' },
      returnTokenIds: true,
    });
    expect(r.prompt).toEqual({ messages: [{ role: 'system', content: 'ab' }] });
    expect(parseRequest('completions', { model: 'm', prompt: [1, 2, 3], logprobs: 2 })).toMatchObject({
      prompt: { ids: [1, 2, 3] },
      logprobs: true,
      topLogprobs: 2,
    });
    expect(parseRequest('completions', { model: 'm', prompt: 'x', logprobs: 0 })).toMatchObject({ logprobs: true, topLogprobs: 0 });
  });

  it.each([
    ['completions', { model: 'm', prompt: 'x', foo: 1 }, 'foo', 'unrecognized_argument', /Unrecognized request argument supplied: foo/],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] }, 'tools[0].function.name', 'invalid_value', /1 to 64/],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'retrieval' }] }, 'tools[0].type', 'invalid_value', /only "function"/],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [TOOL, TOOL] }, 'tools[1].function.name', 'invalid_value', /named twice/],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: Array(129).fill(TOOL) }, 'tools', 'invalid_value', /at most 128/],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tool_choice: 'required' }, 'tool_choice', 'invalid_value', /only allowed when tools/],
    [
      'chat',
      { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [TOOL], tool_choice: { type: 'function', function: { name: 'sub' } } },
      'tool_choice.function.name',
      'invalid_value',
      /"sub" is not one of the tools/,
    ],
    [
      'chat',
      { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [TOOL], tool_choice: { type: 'function' } },
      'tool_choice.function.name',
      'invalid_value',
      /must be the name/,
    ],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [TOOL], tool_choice: 'any' }, 'tool_choice', 'invalid_value', /must be "auto"/],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tool_choice: 'auto' }, 'tool_choice', 'invalid_value', /only allowed when tools/],
    ['completions', { model: 'm', prompt: 'x', tools: [TOOL] }, 'tools', 'unsupported_parameter', /for \/v1\/chat\/completions/],
    ['chat', { model: 'm', messages: [{ role: 'tool', content: '3' }] }, 'messages[0].tool_call_id', 'invalid_value', /must name the call/],
    [
      'chat',
      { model: 'm', messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'add', arguments: '{a' } }] }] },
      'messages[0].tool_calls[0].function.arguments',
      'invalid_value',
      /JSON text of an object/,
    ],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], presence_penalty: 0.5 }, 'presence_penalty', 'unsupported_parameter', /penalties/],
    ['completions', { model: 'm', prompt: 'x', max_tokens: -1 }, 'max_tokens', 'invalid_value', /must be in \[1, /],
    ['completions', { model: 'm', prompt: 'x', temperature: 3 }, 'temperature', 'invalid_value', /\[0, 2\]/],
    ['completions', { model: 'm', prompt: 'x', top_p: 0 }, 'top_p', 'invalid_value', /greater than 0/],
    ['completions', { model: 'm', prompt: 'x', n: 1.5 }, 'n', 'invalid_value', /integer/],
    ['completions', { model: 'm', prompt: 'x', logprobs: 6 }, 'logprobs', 'invalid_value', /\[0, 5\]/],
    ['chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }, 'top_logprobs', 'invalid_value', /requires logprobs/],
    ['chat', { model: 'm', messages: [{ role: 'pilot', content: 'x' }] }, 'messages[0].role', 'invalid_value', /must be one of/],
    ['chat', { model: 'm', messages: [] }, 'messages', 'invalid_value', /non-empty/],
    ['completions', { prompt: 'x' }, 'model', 'invalid_value', /provide a model/],
    ['completions', { model: 'm', prompt: ['a', 'b'] }, 'prompt', 'invalid_value', /several prompts/],
    ['completions', { model: 'm', prompt: 'x', stream_options: { include_usage: true } }, 'stream_options', 'invalid_value', /only allowed when stream/],
    ['completions', { model: 'm', prompt: 'x', stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop', 'invalid_value', /at most 4/],
  ] as const)('%s %j is refused naming %s', (endpoint, body, param, code, message) => {
    const e = refusal(endpoint, body);
    expect(e.status).toBe(400);
    expect(e.body().error).toMatchObject({ param, code, type: 'invalid_request_error' });
    expect(e.message).toMatch(message);
  });

  it('takes parameters named like inherited object properties as unrecognized, never as known ones (nor a crash)', () => {
    // JSON.parse, as the body parser does: `__proto__` becomes an own key of the body.
    for (const k of ['__proto__', 'constructor', 'toString', 'hasOwnProperty']) {
      const body = JSON.parse(`{"model": "m", "prompt": "x", ${JSON.stringify(k)}: 1}`) as unknown;
      const e = refusal('completions', body);
      expect([k, e.status, e.body().error.param, e.body().error.code]).toEqual([k, 400, k, 'unrecognized_argument']);
    }
    // A metadata key `__proto__` is kept as the string it is, not dropped.
    const r = parseRequest('completions', JSON.parse('{"model": "m", "prompt": "x", "metadata": {"__proto__": "a", "b": "c"}}'));
    expect(Object.entries(r.metadata)).toEqual([
      ['__proto__', 'a'],
      ['b', 'c'],
    ]);
  });

  it('reads function tools, tool_choice and a conversation with calls and their results (arguments as objects, the tool named)', () => {
    const r = parseRequest('chat', {
      model: 'm',
      tools: [TOOL],
      parallel_tool_calls: false,
      messages: [
        { role: 'user', content: 'add 1 and 2' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a": 1, "b": 2}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '3' },
      ],
    });
    expect([r.tools, r.parallelToolCalls]).toEqual([[TOOL], false]);
    expect(r.prompt).toEqual({
      messages: [
        { role: 'user', content: 'add 1 and 2' },
        { role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'add', arguments: { a: 1, b: 2 } } }] },
        { role: 'tool', content: '3', tool_call_id: 'call_1', name: 'add' },
      ],
    });
    // No tools, an empty list, or tool_choice none: no tools the model may call (none rendered, none read back).
    const plain = parseRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'x' }] });
    expect(['tools' in plain, plain.parallelToolCalls]).toEqual([false, true]);
    expect(parseRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [] }).tools).toBeUndefined();
    expect(parseRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [TOOL], tool_choice: 'none' }).tools).toBeUndefined();
    expect(parseRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [TOOL], tool_choice: 'auto' }).tools).toEqual([TOOL]);
    const chat = (toolChoice: unknown) =>
      parseRequest('chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [TOOL], tool_choice: toolChoice });
    expect([chat(undefined).toolChoice, chat('required').toolChoice, chat({ type: 'function', function: { name: 'add' } }).toolChoice]).toEqual([
      'auto',
      'required',
      { name: 'add' },
    ]);
    expect(chat('none').toolChoice).toBeUndefined();
  });

  it('accepts the neutral values of parameters it does not implement, and nulls', () => {
    expect(() =>
      parseRequest('completions', { model: 'm', prompt: 'x', echo: false, best_of: 1, logit_bias: {}, suffix: null, presence_penalty: 0 }),
    ).not.toThrow();
  });
});
