/**
 * The gateway's view of what the upstream sends: the server-sent events of a stream, and the
 * response or chunk as the agent asked for it (log-probs and ids the gateway added removed).
 */

type Json = Record<string, unknown>;

/** The `data:` payloads of a server-sent-event body, in order. */
export async function* sseData(res: Response): AsyncGenerator<string> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buf = '';
  for await (const part of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(part, { stream: true });
    let sep: number;
    while ((sep = buf.search(/\r?\n\r?\n/)) >= 0) {
      const event = buf.slice(0, sep);
      buf = buf.slice(sep).replace(/^\r?\n\r?\n/, '');
      const data = event
        .split(/\r?\n/)
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trimStart())
        .join('\n');
      if (data !== '') yield data;
    }
  }
}

/** The upstream response as the agent asked for it: log-probs and ids it did not request removed. */
export function clientView(endpoint: 'chat' | 'completions', body: Json, json: Json): Json {
  const wantsLogprobs = endpoint === 'chat' ? body.logprobs === true : body.logprobs != null;
  const wantsIds = body.return_token_ids === true;
  const choices = Array.isArray(json.choices)
    ? (json.choices as Json[]).map((c) => {
        const copy = { ...c };
        if (!wantsLogprobs) copy.logprobs = null;
        if (!wantsIds) delete copy.token_ids;
        return copy;
      })
    : json.choices;
  const view: Json = { ...json, choices };
  if (!wantsIds) delete view.prompt_token_ids;
  return view;
}

/** A streamed chunk as the agent asked for it, or undefined when nothing is left of it to send. */
export function clientChunk(endpoint: 'chat' | 'completions', body: Json, chunk: Json): Json | undefined {
  const view = clientView(endpoint, body, chunk);
  const wantsUsage = (body.stream_options as Json | undefined)?.include_usage === true;
  if (!wantsUsage && Array.isArray(view.choices) && view.choices.length === 0 && view.usage) return undefined;
  return view;
}
