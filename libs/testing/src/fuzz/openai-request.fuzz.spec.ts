import fc from 'fast-check';
import { OpenAiError, parseRequest } from '@srpo/serving';
import { checkCase, FuzzTally, fuzzParameters, mutatedJson, mutatedText, type Json } from './fuzz';

const BOUND_MS = 250;

/** Valid bodies of both endpoints, as the official clients send them (with the srpo episode fields). */
const CHAT: Json[] = [
  { model: 'solver', messages: [{ role: 'user', content: 'What is 2+2?' }] },
  {
    model: 'solver',
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello' },
      { role: 'user', content: 'Again' },
    ],
    n: 2,
    max_tokens: 16,
    temperature: 0.7,
    top_p: 0.9,
    stop: ['\n'],
    seed: 3,
    logprobs: true,
    metadata: { srpo_episode_id: 'ep-1', srpo_agent_id: 'a', srpo_role: 'solver', srpo_step: '0' },
    stream: true,
    stream_options: { include_usage: true },
  },
  {
    model: 'solver',
    tools: [{ type: 'function', function: { name: 'add', description: 'a + b', parameters: { type: 'object', properties: { a: { type: 'number' } } } } }],
    tool_choice: 'auto',
    parallel_tool_calls: false,
    messages: [
      { role: 'user', content: 'add 1 and 2' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a": 1, "b": 2}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '3' },
    ],
  },
];
const COMPLETIONS: Json[] = [
  { model: 'solver', prompt: 'Once upon', max_tokens: 8 },
  { model: 'solver', prompt: [1, 2, 3], max_tokens: 4, temperature: 0, logprobs: 1, echo: false, stop: 'x' },
];

const isTyped = (e: unknown): boolean => e instanceof OpenAiError && e.status === 400;

describe('fuzz: the OpenAI request parser on mutated bodies', () => {
  it.each([
    ['chat', CHAT],
    ['completions', COMPLETIONS],
  ] as const)('%s: 10,000 structural mutations, a parsed request or a 400 OpenAiError, each within 250 ms', (endpoint, seeds) => {
    const tally = new FuzzTally();
    fc.assert(
      fc.property(mutatedJson(seeds), (body) => {
        tally.add(
          checkCase(
            () => parseRequest(endpoint, body),
            isTyped,
            BOUND_MS,
            () => body,
          ),
        );
      }),
      fuzzParameters(10_000),
    );
    expect(tally.values).toBeGreaterThan(100);
    expect(tally.errors).toBeGreaterThan(1_000);
  });

  it('5,000 byte mutations of the JSON text (what the body parser lets through is parsed; the rest never reaches it)', () => {
    const tally = new FuzzTally();
    let unparsable = 0;
    fc.assert(
      fc.property(mutatedText([...CHAT, ...COMPLETIONS].map((b) => JSON.stringify(b))), (text) => {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          unparsable++;
          return;
        }
        const endpoint = typeof body === 'object' && body !== null && 'messages' in body ? 'chat' : 'completions';
        tally.add(
          checkCase(
            () => parseRequest(endpoint, body),
            isTyped,
            BOUND_MS,
            () => text,
          ),
        );
      }),
      fuzzParameters(5_000),
    );
    expect(tally.cases + unparsable).toBe(fuzzParameters(5_000).numRuns);
    expect(tally.values).toBeGreaterThan(50);
  });
});
