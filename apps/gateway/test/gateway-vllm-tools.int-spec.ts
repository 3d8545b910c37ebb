import * as http from 'http';
import * as path from 'path';
import type { AddressInfo } from 'net';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { ensureKafka, runCommand, uniquePrefix } from '@srpo/testing';
import { bootstrap } from '../src/main';

/** What the stand-in samples for every request: a call, as Hermes-format tokens with their log-probs and ids. */
const PROMPT_IDS = [151644, 872, 198, 718, 220, 16, 323, 220, 17];
const TOKENS = [
  { id: 151657, text: '<tool_call>', logprob: -0.01 },
  { id: 198, text: '\n', logprob: -0.02 },
  { id: 4913, text: '{"name": "add", "arguments": {"a": 1}}', logprob: -0.5 },
  { id: 198, text: '\n', logprob: -0.03 },
  { id: 151658, text: '</tool_call>', logprob: -0.04 },
  { id: 151645, text: '', logprob: -0.05 },
];
const CALL = { id: 'chatcmpl-tool-8d2e', type: 'function', function: { name: 'add', arguments: '{"a": 1}' } };

/**
 * A stand-in for vLLM (≥ 0.10.2 with `--enable-auto-tool-choice --tool-call-parser hermes`):
 * its parser takes the call out of `content` into `tool_calls`, while `token_ids` (asked for
 * with `return_token_ids`) and `logprobs` keep every sampled token; streamed, the call comes as
 * `tool_calls` deltas (name first, then the arguments), with the tokens' ids and log-probs per chunk.
 */
function vllmStandIn(): Promise<{ url: string; close: () => Promise<void> }> {
  const entry = (t: (typeof TOKENS)[number]) => ({ token: t.text, logprob: t.logprob, bytes: [...Buffer.from(t.text)], top_logprobs: [] });
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d: Buffer) => (raw += d.toString()));
    req.on('end', () => {
      const body = JSON.parse(raw) as { stream?: boolean; return_token_ids?: boolean; logprobs?: boolean };
      const base = { id: 'chatcmpl-v', created: 0, model: 'actor' };
      if (!body.stream) {
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            ...base,
            object: 'chat.completion',
            prompt_token_ids: PROMPT_IDS,
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: null, tool_calls: [CALL] },
                logprobs: { content: TOKENS.map(entry) },
                token_ids: TOKENS.map((t) => t.id),
                finish_reason: 'tool_calls',
              },
            ],
          }),
        );
        return;
      }
      res.setHeader('content-type', 'text/event-stream');
      const send = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
        res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', ...extra, choices: [{ index: 0, ...choice }] })}\n\n`);
      const chunk = (i: number, delta: Record<string, unknown>, finish: string | null = null) =>
        send(
          { delta, logprobs: { content: [entry(TOKENS[i])] }, token_ids: [TOKENS[i].id], finish_reason: finish },
          i === 0 ? { prompt_token_ids: PROMPT_IDS } : {},
        );
      chunk(0, { role: 'assistant' });
      chunk(1, {});
      chunk(2, { tool_calls: [{ index: 0, id: CALL.id, type: 'function', function: { name: 'add', arguments: '' } }] });
      chunk(3, { tool_calls: [{ index: 0, function: { arguments: CALL.function.arguments } }] });
      chunk(4, {});
      chunk(5, {}, 'tool_calls');
      res.end('data: [DONE]\n\n');
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, close: () => new Promise((r) => server.close(() => r())) }),
    ),
  );
}

/**
 * The Python `openai` client with function tools, whole and streamed, through the gateway (this
 * process, the real broker) in front of an upstream speaking vLLM's tool-call response format:
 * the client gets its calls, and the recorded outputs hold exactly the ids and log-probs the
 * upstream returned.
 */
describe('srpo gateway in front of a vLLM-format upstream: tool calls from the Python client', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'gateway-vllm-tools-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('gwvllm');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  let app: NestExpressApplication;
  let up: Awaited<ReturnType<typeof vllmStandIn>>;

  beforeAll(async () => {
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    up = await vllmStandIn();
    app = await bootstrap({
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_GATEWAY_PORT: '0',
      SRPO_GATEWAY_UPSTREAM: up.url,
      SRPO_GATEWAY_VERSION: '2',
      SRPO_LOG_LEVEL: 'warn',
    });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await up?.close();
  });

  it('answers the calls and records every sampled token of them with its log-prob', async () => {
    const base = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}/v1`;
    const out = JSON.parse(await runCommand('python3', [path.join(__dirname, 'gateway_vllm_tools_check.py'), base])) as {
      whole: { finish: string; content: string | null; calls: { name: string; arguments: string }[]; outputIds: string[] };
      streamed: { finish: string; calls: { name: string; arguments: string }[]; outputIds: string[] };
    };
    expect(out.whole).toEqual({ finish: 'tool_calls', content: null, calls: [{ name: 'add', arguments: '{"a": 1}' }], outputIds: ['ep-vllm-tools.s0.py'] });
    expect(out.streamed).toEqual({ finish: 'tool_calls', calls: [{ name: 'add', arguments: '{"a": 1}' }], outputIds: ['ep-vllm-tools.s1.py'] });
    const recorded = (await readTopicsToEnd(kafka, [catalog.agentOutputs.name])).map((r) => codec.decodeAs('AgentOutput', r.value));
    expect(recorded.map((o) => o.outputId).sort()).toEqual(['ep-vllm-tools.s0.py', 'ep-vllm-tools.s1.py']);
    for (const o of recorded) {
      expect(o.contextTokenIds).toEqual(PROMPT_IDS);
      expect(o.responseTokenIds).toEqual(TOKENS.map((t) => t.id));
      // Avro carries log-probs as float32.
      expect(o.behaviourLogProbs).toEqual(TOKENS.map((t) => Math.fround(t.logprob)));
      expect([o.tokenIdOrigin, o.policyVersion, o.malformedToolCall]).toEqual(['sampled', 2, false]);
    }
  });
});
