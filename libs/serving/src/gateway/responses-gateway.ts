import { OpenAiError } from '../openai-protocol';
import type { ApiKeys } from './api-keys';
import type { CompletionGateway, Headers, Responder } from './completion-gateway';
import { ResponseStore } from './response-store';
import { ResponseStreamTranslator } from './response-stream';
import { assistantMessageOf, chatRequestOf, newId, outputItemsOf, responseOf } from './responses-api';

type Json = Record<string, unknown>;

/**
 * `srpo gateway`'s Responses API: each request translated (responses-api.ts) and sent through
 * the gateway's chat path, so keys, episode fields, turns and recording are the chat path's own.
 */
export class ResponsesGateway {
  constructor(
    private readonly gateway: CompletionGateway,
    private readonly keys: ApiKeys,
    readonly store: ResponseStore = new ResponseStore(),
    private readonly clock: () => number = Date.now,
  ) {}

  /**
   * `POST /v1/responses`: the request goes through {@link complete}'s chat path (keys, episode
   * fields, upstream, recording) as the chat request it translates to, and the answer comes back
   * as a response object, or as the Responses stream's events. A stored response (`store`, the
   * default) is the conversation a later `previous_response_id` continues, for the same key.
   */
  async respond(headers: Headers, body: unknown, out: Responder): Promise<void> {
    const auth = headers.authorization;
    const key = this.keys.authorize(Array.isArray(auth) ? auth[0] : auth, undefined);
    const prev = (body as Json | null)?.previous_response_id;
    if (prev != null && typeof prev !== 'string') throw new OpenAiError(400, 'previous_response_id: must be a string', 'previous_response_id', 'invalid_value');
    const plan = chatRequestOf(body, typeof prev === 'string' ? this.store.get(prev, key?.id) : undefined);
    const id = newId('resp');
    const createdAt = Math.floor(this.clock() / 1000);
    const remember = (output: Json[]) => {
      if (plan.store) this.store.put(id, [...plan.messages, assistantMessageOf(output)], key?.id);
    };
    if (plan.chat.stream !== true) {
      let reply: { body: Json; headers?: Record<string, string> } | undefined;
      const inner: Responder = { ...silent, json: (_status, b, h) => void (reply = { body: b as Json, headers: h }), gone: out.gone };
      await this.gateway.complete('chat', headers, plan.chat, inner);
      const chat = reply?.body ?? {};
      const output = outputItemsOf((((chat.choices as Json[] | undefined) ?? [])[0]?.message as Json | undefined) ?? {});
      remember(output);
      return out.json(200, responseOf(id, createdAt, plan, chat, output), reply?.headers);
    }
    const translator = new ResponseStreamTranslator(id, createdAt, plan, (type, data) => out.write(`event: ${type}\ndata: ${JSON.stringify(data)}\n\n`));
    let opened = false;
    let started = false;
    let failed = false;
    const inner: Responder = {
      ...silent,
      gone: out.gone,
      startStream: (h) => {
        opened = true;
        out.startStream(h);
      },
      write: async (data) => {
        const payload = data.replace(/^data: /, '').trim();
        if (payload === '[DONE]') return;
        if (!started) {
          started = true;
          await translator.start();
        }
        const chunk = JSON.parse(payload) as Json;
        if (chunk.error) {
          failed = true;
          return translator.failed(chunk.error as Json);
        }
        await translator.chunk(chunk);
      },
    };
    try {
      await this.gateway.complete('chat', headers, plan.chat, inner);
      if (started && !failed) remember(await translator.end());
    } finally {
      if (opened) out.end();
    }
  }
}

/** A responder that takes nothing: {@link CompletionGateway.respond} overrides what it reads. */
const silent: Responder = { json: () => undefined, startStream: () => undefined, write: async () => undefined, end: () => undefined };
