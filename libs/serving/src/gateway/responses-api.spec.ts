import { ResponseStore } from './response-store';
import { ResponseStreamTranslator } from './response-stream';
import { assistantMessageOf, chatRequestOf, outputItemsOf } from './responses-api';

describe('Responses API → chat', () => {
  it('turns instructions, input items, function calls and their outputs into chat messages, and tools into chat tools', () => {
    const plan = chatRequestOf(
      {
        model: 'actor',
        instructions: 'be brief',
        input: [
          { role: 'developer', content: 'rules' },
          {
            type: 'message',
            role: 'user',
            content: [
              { type: 'input_text', text: 'add ' },
              { type: 'input_text', text: '1 and 2' },
            ],
          },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Calling.' }] },
          { type: 'function_call', call_id: 'c1', name: 'add', arguments: '{"a":1}' },
          { type: 'function_call', call_id: 'c2', name: 'add', arguments: '{"a":2}' },
          { type: 'function_call_output', call_id: 'c1', output: '3' },
        ],
        tools: [{ type: 'function', name: 'add', parameters: { type: 'object' }, strict: false }],
        tool_choice: { type: 'function', name: 'add' },
        max_output_tokens: 7,
        temperature: 0.5,
        store: false,
      },
      undefined,
    );
    expect(plan.chat).toEqual({
      model: 'actor',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'system', content: 'rules' },
        { role: 'user', content: 'add 1 and 2' },
        {
          role: 'assistant',
          content: 'Calling.',
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'add', arguments: '{"a":1}' } },
            { id: 'c2', type: 'function', function: { name: 'add', arguments: '{"a":2}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: '3' },
      ],
      tools: [{ type: 'function', function: { name: 'add', parameters: { type: 'object' }, strict: false } }],
      tool_choice: { type: 'function', function: { name: 'add' } },
      max_tokens: 7,
      temperature: 0.5,
    });
    expect(plan.store).toBe(false);
  });

  it('continues a previous conversation; a string input is one user message; streaming asks for usage', () => {
    const previous = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
    ];
    const plan = chatRequestOf({ model: 'm', input: 'more', stream: true }, previous);
    expect(plan.chat.messages).toEqual([...previous, { role: 'user', content: 'more' }]);
    expect([plan.chat.stream, plan.chat.stream_options]).toEqual([true, { include_usage: true }]);
  });

  it.each([
    [{ model: 'm', input: 'x', reasoning: { effort: 'high' } }, 'reasoning'],
    [{ model: 'm', input: 'x', text: { format: { type: 'json_schema' } } }, 'text'],
    [{ model: 'm', input: 'x', tools: [{ type: 'web_search_preview' }] }, 'tools[0].type'],
    [{ model: 'm', input: [{ type: 'input_image', image_url: 'x' }] }, 'input[0].type'],
    [{ model: 'm', input: [{ role: 'user', content: [{ type: 'input_image' }] }] }, 'input[0].content[0]'],
    [{ model: 'm', input: [] }, 'input'],
    [{ model: 'm', input: [{ type: 'function_call', name: 'f' }] }, 'input[0]'],
    [{ input: 'x' }, 'model'],
  ])('refuses what it does not translate, naming the parameter: %j', (body, param) => {
    expect(() => chatRequestOf(body, undefined)).toThrow(expect.objectContaining({ status: 400, param }));
  });

  it('accepts the neutral values of what it does not implement', () => {
    expect(() =>
      chatRequestOf({ model: 'm', input: 'x', truncation: 'disabled', text: { format: { type: 'text' } }, include: [], background: false }, undefined),
    ).not.toThrow();
  });
});

describe('chat → Responses', () => {
  it('makes a message item of the text and a function_call item per call, and back into the chat message a later turn sends', () => {
    const message = { role: 'assistant', content: 'Sure.', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a":1}' } }] };
    const items = outputItemsOf(message);
    expect(items).toMatchObject([
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Sure.' }] },
      { type: 'function_call', call_id: 'call_1', name: 'add', arguments: '{"a":1}' },
    ]);
    expect(assistantMessageOf(items)).toEqual(message);
    expect(assistantMessageOf(outputItemsOf({ content: null, tool_calls: message.tool_calls }))).toEqual({ ...message, content: null });
  });

  it('streams events in order: created, items added, deltas, done, completed with the whole response', async () => {
    const events: { type: string; data: Record<string, unknown> }[] = [];
    const plan = chatRequestOf({ model: 'm', input: 'x', stream: true }, undefined);
    const t = new ResponseStreamTranslator('resp_1', 0, plan, (type, data) => Promise.resolve(void events.push({ type, data })));
    await t.start();
    await t.chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'He' } }] });
    await t.chunk({ choices: [{ index: 0, delta: { content: 'llo' }, finish_reason: 'stop' }] });
    await t.chunk({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }, srpo: { output_ids: ['o'] } });
    const output = await t.end();
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i));
    const response = events[events.length - 1].data.response as Record<string, unknown>;
    expect(response).toMatchObject({
      id: 'resp_1',
      status: 'completed',
      usage: { input_tokens: 3, output_tokens: 2, total_tokens: 5 },
      srpo: { output_ids: ['o'] },
    });
    expect(output).toMatchObject([{ type: 'message', content: [{ text: 'Hello' }] }]);
  });
});

describe('response store', () => {
  it('gives a conversation back to the key that stored it only, and forgets by count and age', () => {
    let now = 0;
    const store = new ResponseStore({ maxResponses: 2, maxBytes: 1_000_000, ttlMs: 100, clock: () => now });
    const conv = [{ role: 'user', content: 'hi' }];
    store.put('r1', conv, 'k1');
    expect(store.get('r1', 'k1')).toEqual(conv);
    expect(() => store.get('r1', 'k2')).toThrow(expect.objectContaining({ status: 400, param: 'previous_response_id' }));
    store.put('r2', conv, 'k1');
    store.put('r3', conv, 'k1');
    expect(() => store.get('r1', 'k1')).toThrow(/not found/);
    now = 100;
    expect(() => store.get('r3', 'k1')).toThrow(/not found/);
  });
});
