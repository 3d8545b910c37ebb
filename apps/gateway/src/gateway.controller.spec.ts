import * as http from 'http';
import type { AddressInfo } from 'net';
import OpenAI from 'openai';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { AgentEventsProducer, createKafka } from '@srpo/events';
import { loadGatewayConfig } from './gateway-config';
import { createGatewayApp } from './main';

/** Model ids that name properties every plain object inherits. */
const INHERITED = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf'];
const SERVED = new Set(['up-actor', 'actor']);

/**
 * An upstream serving `up-actor` and `actor` only, refusing other models with OpenAI's 404
 * (as vLLM does), and keeping the model of every request it got.
 */
function fakeUpstream(): Promise<{ url: string; seen: unknown[]; close: () => Promise<void> }> {
  const seen: unknown[] = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d: Buffer) => (raw += d.toString()));
    req.on('end', () => {
      const body = JSON.parse(raw) as { model?: unknown };
      seen.push(body.model);
      res.setHeader('content-type', 'application/json');
      if (typeof body.model !== 'string' || !SERVED.has(body.model)) {
        res.statusCode = 404;
        res.end(
          JSON.stringify({
            error: { message: `The model '${String(body.model)}' does not exist`, type: 'invalid_request_error', param: 'model', code: 'model_not_found' },
          }),
        );
        return;
      }
      const choice = req.url?.endsWith('/chat/completions')
        ? { index: 0, message: { role: 'assistant', content: 'ok' }, logprobs: null, finish_reason: 'stop' }
        : { index: 0, text: 'ok', logprobs: null, finish_reason: 'stop' };
      res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 0, model: body.model, choices: [choice] }));
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, seen, close: () => new Promise((r) => server.close(() => r())) }),
    ),
  );
}

/** The refusal the official client raises for `model` on both endpoints, or 'ok' when the call went through. */
async function outcome(client: OpenAI, model: string): Promise<unknown[]> {
  const shape = (e: unknown): unknown[] => (e instanceof OpenAI.APIError ? [e.status, e.code, e.param, e.message] : ['not an API error', String(e)]);
  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }).then(() => 'ok', shape);
  const text = await client.completions.create({ model, prompt: 'hi' }).then(() => 'ok', shape);
  return [chat, text];
}

/**
 * The gateway app over HTTP, called with the official openai client: a model id that names an
 * inherited property of plain objects is an unknown model like any other. Requests carry no
 * episode fields and the gateway is not strict, so nothing is recorded: the producer is never
 * connected and no broker is needed.
 */
describe('srpo gateway: model ids that are Object.prototype names', () => {
  const sdk = new AgentEventsProducer({ kafka: createKafka({ brokers: ['127.0.0.1:1'], clientId: 'unused' }) });
  let up: Awaited<ReturnType<typeof fakeUpstream>>;
  let app: NestExpressApplication | undefined;

  const start = async (env: Record<string, string>): Promise<OpenAI> => {
    const config = loadGatewayConfig({ SRPO_GATEWAY_UPSTREAM: up.url, SRPO_GATEWAY_STRICT: 'false', ...env }, process.cwd());
    app = await createGatewayApp(config, sdk);
    await app.listen(0, '127.0.0.1');
    const port = (app.getHttpServer().address() as AddressInfo).port;
    return new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
  };

  beforeEach(async () => {
    up = await fakeUpstream();
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await up.close();
  });

  it('with an allowlist (SRPO_GATEWAY_MODELS): 404 model_not_found from the gateway, as for any unknown model, nothing sent upstream', async () => {
    const client = await start({ SRPO_GATEWAY_MODELS: 'actor=up-actor' });
    expect(await outcome(client, 'actor')).toEqual(['ok', 'ok']);
    expect(up.seen).toEqual(['up-actor', 'up-actor']);
    const unknown = (id: string) => [404, 'model_not_found', 'model', `404 The model '${id}' does not exist; the gateway serves actor`];
    for (const id of ['gpt-4', ...INHERITED]) expect([id, await outcome(client, id)]).toEqual([id, [unknown(id), unknown(id)]]);
    expect(up.seen).toHaveLength(2);
    // /v1/models lists the allowlist only.
    expect((await client.models.list()).data.map((m) => m.id)).toEqual(['actor']);
  });

  it('without an allowlist: the id goes upstream as the string it is, and the upstream 404 comes back as for any unknown model', async () => {
    const client = await start({});
    const unknown = (id: string) => [404, 'model_not_found', 'model', `404 The model '${id}' does not exist`];
    for (const id of ['gpt-4', ...INHERITED]) expect([id, await outcome(client, id)]).toEqual([id, [unknown(id), unknown(id)]]);
    expect(up.seen).toEqual(['gpt-4', ...INHERITED].flatMap((id) => [id, id]));
  });
});
