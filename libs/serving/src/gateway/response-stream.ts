import { messageItem, newId, responseOf, type ResponsesPlan } from './responses-api';

type Json = Record<string, unknown>;

/**
 * The Responses stream's events for a streamed chat answer: `response.created` and
 * `in_progress`, an output item per text and per call with their deltas, `done` events, and
 * `response.completed` (or `incomplete`) with the whole response. `emit` writes one event.
 */
export class ResponseStreamTranslator {
  private seq = 0;
  private text?: { id: string; index: number; text: string };
  private readonly calls = new Map<number, { id: string; index: number; callId: string; name: string; args: string }>();
  private items = 0;
  private finish: unknown = null;
  private srpo: unknown;
  private usage: unknown;

  constructor(
    private readonly id: string,
    private readonly createdAt: number,
    private readonly plan: ResponsesPlan,
    private readonly emit: (type: string, data: Json) => Promise<void>,
  ) {}

  async start(): Promise<void> {
    const response = {
      id: this.id,
      object: 'response',
      created_at: this.createdAt,
      status: 'in_progress',
      error: null,
      incomplete_details: null,
      ...this.plan.echo,
      output: [],
      usage: null,
    };
    await this.event('response.created', { response });
    await this.event('response.in_progress', { response });
  }

  /** One chat chunk of the gateway's chat path. */
  async chunk(chunk: Json): Promise<void> {
    if (chunk.srpo) this.srpo = chunk.srpo;
    if (chunk.usage) this.usage = chunk.usage;
    for (const c of (chunk.choices as Json[] | undefined) ?? []) {
      const delta = (c.delta ?? {}) as Json;
      if (typeof delta.content === 'string' && delta.content !== '') await this.textDelta(delta.content);
      for (const tc of (delta.tool_calls as Json[] | undefined) ?? []) await this.callDelta(tc);
      if (c.finish_reason != null) this.finish = c.finish_reason;
    }
  }

  /** The stream ended: every open item is done, then the response. Returns the response's output. */
  async end(): Promise<Json[]> {
    const output: { index: number; item: Json }[] = [];
    if (this.text) {
      const t = this.text;
      const part = { type: 'output_text', text: t.text, annotations: [] };
      await this.event('response.output_text.done', { item_id: t.id, output_index: t.index, content_index: 0, text: t.text });
      await this.event('response.content_part.done', { item_id: t.id, output_index: t.index, content_index: 0, part });
      const item = messageItem(t.id, t.text, 'completed');
      await this.event('response.output_item.done', { output_index: t.index, item });
      output.push({ index: t.index, item });
    }
    for (const c of this.calls.values()) {
      await this.event('response.function_call_arguments.done', { item_id: c.id, output_index: c.index, arguments: c.args });
      const item = { type: 'function_call', id: c.id, call_id: c.callId, name: c.name, arguments: c.args, status: 'completed' };
      await this.event('response.output_item.done', { output_index: c.index, item });
      output.push({ index: c.index, item });
    }
    const items = output.sort((a, b) => a.index - b.index).map((o) => o.item);
    const chat = { choices: [{ finish_reason: this.finish }], ...(this.usage ? { usage: this.usage } : {}), ...(this.srpo ? { srpo: this.srpo } : {}) };
    const response = responseOf(this.id, this.createdAt, this.plan, chat, items);
    await this.event(response.status === 'completed' ? 'response.completed' : 'response.incomplete', { response });
    return items;
  }

  async failed(error: Json): Promise<void> {
    await this.event('error', { code: error.code ?? null, message: error.message ?? 'the request failed', param: error.param ?? null });
  }

  private async textDelta(delta: string): Promise<void> {
    if (!this.text) {
      this.text = { id: newId('msg'), index: this.items++, text: '' };
      await this.event('response.output_item.added', { output_index: this.text.index, item: messageItem(this.text.id, '', 'in_progress', []) });
      await this.event('response.content_part.added', {
        item_id: this.text.id,
        output_index: this.text.index,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [] },
      });
    }
    this.text.text += delta;
    await this.event('response.output_text.delta', { item_id: this.text.id, output_index: this.text.index, content_index: 0, delta, logprobs: [] });
  }

  private async callDelta(tc: Json): Promise<void> {
    const k = typeof tc.index === 'number' ? tc.index : this.calls.size;
    const fn = (tc.function ?? {}) as Json;
    let call = this.calls.get(k);
    if (!call) {
      call = {
        id: newId('fc'),
        index: this.items++,
        callId: typeof tc.id === 'string' ? tc.id : newId('call'),
        name: typeof fn.name === 'string' ? fn.name : '',
        args: '',
      };
      this.calls.set(k, call);
      const item = { type: 'function_call', id: call.id, call_id: call.callId, name: call.name, arguments: '', status: 'in_progress' };
      await this.event('response.output_item.added', { output_index: call.index, item });
    }
    if (typeof fn.arguments === 'string' && fn.arguments !== '') {
      call.args += fn.arguments;
      await this.event('response.function_call_arguments.delta', { item_id: call.id, output_index: call.index, delta: fn.arguments });
    }
  }

  private async event(type: string, data: Json): Promise<void> {
    await this.emit(type, { type, sequence_number: this.seq++, ...data });
  }
}
