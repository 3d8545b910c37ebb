import { randomBytes } from 'crypto';
import { OpenAiError } from '../openai-protocol';

/*
 * OpenAI's Responses API (`POST /v1/responses`) at the gateway, as a translation over its Chat
 * Completions path: the request becomes a chat request (recorded there like any other), and the
 * chat answer, whole or streamed, becomes a response object or the Responses stream's events.
 * The upstream is always asked through Chat Completions (srpo serve has no /v1/responses), so
 * what is recorded is the same whichever API the agent speaks.
 */

type Json = Record<string, unknown>;

/** A chat message as the gateway's chat path takes it. */
type ChatMessage = Json & { role: string };

/** Fields of a Responses request that are accepted at these values only (else refused, naming them). */
const NEUTRAL: Record<string, (v: unknown) => boolean> = {
  truncation: (v) => v === 'disabled',
  background: (v) => v === false,
  include: (v) => Array.isArray(v) && v.length === 0,
  text: (v) => {
    const format = (v as Json | null)?.format as Json | undefined;
    return typeof v === 'object' && v !== null && (format === undefined || format.type === 'text');
  },
  reasoning: () => false,
  prompt: () => false,
  top_logprobs: (v) => v === 0,
  max_tool_calls: () => false,
  service_tier: (v) => v === 'auto' || v === 'default',
};
const PASSED = new Set(['model', 'input', 'instructions', 'tools', 'tool_choice', 'parallel_tool_calls', 'max_output_tokens', 'temperature', 'top_p']);
const KEPT = new Set(['stream', 'store', 'metadata', 'user', 'previous_response_id', 'stream_options']);
/** Items of a conversation held for `previous_response_id`, and their size bound. */
const MAX_INPUT_ITEMS = 2048;

/** What a Responses request becomes: the chat request, and what the response object echoes. */
export interface ResponsesPlan {
  chat: Json;
  /** The messages the chat request was made of (previous response's included): stored with the answer. */
  messages: ChatMessage[];
  echo: Json;
  store: boolean;
}

/**
 * The chat request for a Responses request. `previous` is the conversation of
 * `previous_response_id` (its messages and answer), looked up by the caller. Throws
 * {@link OpenAiError} (400) naming the parameter for what is not translated.
 */
export function chatRequestOf(body: unknown, previous: ChatMessage[] | undefined): ResponsesPlan {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw bad('body', 'the request body must be a JSON object');
  const b = body as Json;
  for (const [k, v] of Object.entries(b)) {
    if (v === null || v === undefined || PASSED.has(k) || KEPT.has(k)) continue;
    const neutral = NEUTRAL[k];
    if (neutral?.(v)) continue;
    throw new OpenAiError(
      400,
      `Unsupported parameter: '${k}' is not supported by this gateway's Responses API (it is answered through Chat Completions).`,
      k,
      'unsupported_parameter',
    );
  }
  if (typeof b.model !== 'string' || b.model === '') throw bad('model', 'you must provide a model parameter');
  const messages: ChatMessage[] = [...(previous ?? [])];
  if (b.instructions != null) {
    if (typeof b.instructions !== 'string') throw bad('instructions', 'must be a string');
    // Instructions are not carried over from a previous response (as OpenAI's): they lead this request only.
    messages.unshift({ role: 'system', content: b.instructions });
  }
  messages.push(...messagesOfInput(b.input));
  const chat: Json = { model: b.model, messages };
  const tools = toolsOf(b.tools);
  if (tools) chat.tools = tools;
  if (b.tool_choice != null) chat.tool_choice = toolChoiceOf(b.tool_choice);
  for (const [from, to] of [
    ['parallel_tool_calls', 'parallel_tool_calls'],
    ['max_output_tokens', 'max_tokens'],
    ['temperature', 'temperature'],
    ['top_p', 'top_p'],
    ['metadata', 'metadata'],
    ['user', 'user'],
  ] as const)
    if (b[from] != null) chat[to] = b[from];
  if (b.stream === true) {
    chat.stream = true;
    // The usage for the last event's response.
    chat.stream_options = { include_usage: true };
  }
  const echo: Json = {
    model: b.model,
    instructions: b.instructions ?? null,
    tools: Array.isArray(b.tools) ? b.tools : [],
    tool_choice: b.tool_choice ?? 'auto',
    parallel_tool_calls: b.parallel_tool_calls ?? true,
    temperature: b.temperature ?? 1,
    top_p: b.top_p ?? 1,
    max_output_tokens: b.max_output_tokens ?? null,
    previous_response_id: b.previous_response_id ?? null,
    metadata: b.metadata ?? {},
    store: b.store !== false,
    truncation: 'disabled',
    text: { format: { type: 'text' } },
    reasoning: { effort: null, summary: null },
  };
  return { chat, messages, echo, store: b.store !== false };
}

/** `input`: a string (one user message) or a list of items: messages, function calls and their outputs. */
function messagesOfInput(input: unknown): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input) || input.length === 0) throw bad('input', 'must be a string or a non-empty list of input items');
  if (input.length > MAX_INPUT_ITEMS) throw bad('input', `has ${input.length} items; the limit is ${MAX_INPUT_ITEMS}`);
  const out: ChatMessage[] = [];
  input.forEach((item: unknown, i) => {
    const p = `input[${i}]`;
    if (typeof item !== 'object' || item === null) throw bad(p, 'must be an object');
    const it = item as Json;
    const type = it.type ?? 'message';
    if (type === 'message') {
      const role = it.role === 'developer' ? 'system' : it.role;
      if (role !== 'user' && role !== 'assistant' && role !== 'system') throw bad(`${p}.role`, 'must be user, assistant, system or developer');
      out.push({ role, content: textOf(it.content, `${p}.content`) });
    } else if (type === 'function_call') {
      if (typeof it.call_id !== 'string' || typeof it.name !== 'string' || typeof it.arguments !== 'string')
        throw bad(p, 'a function_call item needs call_id, name and arguments (strings)');
      const call = { id: it.call_id, type: 'function', function: { name: it.name, arguments: it.arguments } };
      const last = out[out.length - 1];
      // The calls of one answer follow its text (if any): they are one assistant message in chat.
      if (last && last.role === 'assistant') last.tool_calls = [...((last.tool_calls as unknown[]) ?? []), call];
      else out.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (type === 'function_call_output') {
      if (typeof it.call_id !== 'string') throw bad(`${p}.call_id`, 'must be a string');
      out.push({ role: 'tool', tool_call_id: it.call_id, content: typeof it.output === 'string' ? it.output : JSON.stringify(it.output ?? '') });
    } else if (type === 'item_reference' || type === 'reasoning') {
      throw new OpenAiError(
        400,
        `Unsupported parameter: '${p}.type': ${String(type)} items are not supported by this gateway.`,
        `${p}.type`,
        'unsupported_parameter',
      );
    } else throw bad(`${p}.type`, `must be message, function_call or function_call_output, got ${JSON.stringify(type)}`);
  });
  return out;
}

/** A message's content: a string, or parts of text (`input_text`, `output_text`). */
function textOf(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw bad(param, 'must be a string or a list of text parts');
  return content
    .map((part: unknown, j) => {
      const t = (part as Json | null)?.type;
      if ((t === 'input_text' || t === 'output_text' || t === 'text') && typeof (part as Json).text === 'string') return (part as Json).text as string;
      throw new OpenAiError(
        400,
        `Unsupported parameter: '${param}[${j}]': only text parts are supported, got ${JSON.stringify(t)}.`,
        `${param}[${j}]`,
        'unsupported_parameter',
      );
    })
    .join('');
}

/** Function tools, `{type, name, description, parameters, strict}`, as chat's `{type, function: {...}}`. */
function toolsOf(v: unknown): Json[] | undefined {
  if (v == null) return undefined;
  if (!Array.isArray(v)) throw bad('tools', 'must be a list');
  if (v.length === 0) return undefined;
  return v.map((t: unknown, i) => {
    const tool = (t ?? {}) as Json;
    if (tool.type !== 'function')
      throw new OpenAiError(
        400,
        `Unsupported parameter: 'tools[${i}].type': only function tools are supported, got ${JSON.stringify(tool.type)}.`,
        `tools[${i}].type`,
        'unsupported_parameter',
      );
    const { type: _type, ...fn } = tool;
    return { type: 'function', function: fn };
  });
}

function toolChoiceOf(v: unknown): unknown {
  if (typeof v === 'string') return v;
  const c = v as Json;
  if (typeof c === 'object' && c !== null && c.type === 'function' && typeof c.name === 'string') return { type: 'function', function: { name: c.name } };
  throw bad('tool_choice', 'must be "auto", "none", "required" or {"type": "function", "name": ...}');
}

/** The Responses output items of one chat answer: its text as a message, then its calls. */
export function outputItemsOf(message: Json): Json[] {
  const items: Json[] = [];
  const text = typeof message.content === 'string' ? message.content : '';
  if (text !== '' || !Array.isArray(message.tool_calls) || message.tool_calls.length === 0) items.push(messageItem(newId('msg'), text, 'completed'));
  for (const c of (message.tool_calls as Json[] | undefined) ?? []) {
    const fn = (c.function ?? {}) as Json;
    items.push({ type: 'function_call', id: newId('fc'), call_id: c.id, name: fn.name, arguments: fn.arguments, status: 'completed' });
  }
  return items;
}

/** The chat message a response's output makes, for the conversation that continues it. */
export function assistantMessageOf(output: Json[]): ChatMessage {
  const text = output
    .filter((i) => i.type === 'message')
    .map((i) => ((i.content as Json[])[0]?.text as string | undefined) ?? '')
    .join('');
  const calls = output
    .filter((i) => i.type === 'function_call')
    .map((i) => ({ id: i.call_id, type: 'function', function: { name: i.name, arguments: i.arguments } }));
  return { role: 'assistant', content: calls.length > 0 && text === '' ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
}

/** The response object of a finished chat answer. */
export function responseOf(id: string, createdAt: number, plan: ResponsesPlan, chat: Json, output: Json[]): Json {
  const choice = ((chat.choices as Json[] | undefined) ?? [])[0] ?? {};
  const usage = chat.usage as Json | undefined;
  const cut = choice.finish_reason === 'length';
  return {
    id,
    object: 'response',
    created_at: createdAt,
    status: cut ? 'incomplete' : 'completed',
    error: null,
    incomplete_details: cut ? { reason: 'max_output_tokens' } : null,
    ...plan.echo,
    output,
    usage: usage
      ? {
          input_tokens: usage.prompt_tokens,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: usage.completion_tokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: usage.total_tokens,
        }
      : null,
    ...(chat.srpo ? { srpo: chat.srpo } : {}),
  };
}

export function messageItem(id: string, text: string, status: string, content?: Json[]): Json {
  return { type: 'message', id, status, role: 'assistant', content: content ?? [{ type: 'output_text', text, annotations: [] }] };
}

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(16).toString('hex')}`;
}

function bad(param: string, problem: string): OpenAiError {
  return new OpenAiError(400, `${param}: ${problem}`, param, 'invalid_value');
}
