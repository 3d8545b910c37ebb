import { parseToolCalls, type FunctionTool } from './tool-calls';

const tools: FunctionTool[] = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'add' } },
];

const block = (json: string) => `<tool_call>\n${json}\n</tool_call>`;

describe('parseToolCalls (Hermes format)', () => {
  it('reads one call; the text before it is the content, none when only whitespace', () => {
    const parsed = parseToolCalls(block('{"name": "get_weather", "arguments": {"city": "Paris"}}'), tools);
    expect(parsed?.content).toBeNull();
    expect(parsed?.calls).toEqual([
      { id: expect.stringMatching(/^call_[0-9a-f]{24}$/) as unknown, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
    ]);
    const withText = parseToolCalls(`Let me check.\n${block('{"name": "add", "arguments": {"a": 1, "b": 2}}')}\n`, tools);
    expect(withText?.content).toBe('Let me check.\n');
    expect(withText?.calls.map((c) => c.function)).toEqual([{ name: 'add', arguments: '{"a":1,"b":2}' }]);
  });

  it('reads several calls, each with its own id; arguments given as a JSON text or left out', () => {
    const parsed = parseToolCalls(`${block('{"name": "add", "arguments": "{\\"a\\": 1}"}')}\n${block('{"name": "get_weather"}')}`, tools);
    expect(parsed?.calls.map((c) => c.function)).toEqual([
      { name: 'add', arguments: '{"a":1}' },
      { name: 'get_weather', arguments: '{}' },
    ]);
    expect(new Set(parsed?.calls.map((c) => c.id)).size).toBe(2);
  });

  it.each([
    ['plain text', 'The weather is fine.'],
    ['a block left open (cut by max_tokens)', '<tool_call>\n{"name": "add", "arguments": {"a": 1'],
    ['JSON that does not parse', block('{name: add}')],
    ['JSON that is not an object', block('["add"]')],
    ['a name that is no tool of the request', block('{"name": "rm_rf", "arguments": {}}')],
    ['arguments that are not an object', block('{"name": "add", "arguments": [1, 2]}')],
    ['arguments text that does not parse', block('{"name": "add", "arguments": "{a: 1"}')],
    ['text after the last block', `${block('{"name": "add", "arguments": {}}')}\nand then I said`],
  ])('%s: answered as text (undefined)', (_, text) => {
    expect(parseToolCalls(text, tools)).toBeUndefined();
  });

  it('more than one call where parallel_tool_calls is false is malformed; one call is fine', () => {
    const two = `${block('{"name": "add", "arguments": {}}')}${block('{"name": "add", "arguments": {}}')}`;
    expect(parseToolCalls(two, tools, { parallel: false })).toBeUndefined();
    expect(parseToolCalls(two, tools, { parallel: true })?.calls).toHaveLength(2);
    expect(parseToolCalls(block('{"name": "add", "arguments": {}}'), tools, { parallel: false })?.calls).toHaveLength(1);
  });
});
