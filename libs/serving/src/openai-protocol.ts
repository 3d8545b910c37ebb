import type { ChatMessage, TemplateToolCall } from '@srpo/hf';
import type { FunctionTool, ToolChoice } from './tool-calls';

/**
 * OpenAI's error object (`{"error": {...}}`), with the HTTP status it is sent with. Thrown by
 * request parsing and the completion service; only the HTTP layer turns it into a response.
 */
export class OpenAiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly type: string = status === 401
      ? 'authentication_error'
      : status === 403
        ? 'permission_error'
        : status >= 500
          ? 'server_error'
          : 'invalid_request_error',
  ) {
    super(message);
    this.name = 'OpenAiError';
  }

  /** Response headers that go with the refusal (`Retry-After` on a 429). */
  headers: Readonly<Record<string, string>> = {};

  withHeaders(headers: Readonly<Record<string, string>>): this {
    this.headers = { ...this.headers, ...headers };
    return this;
  }

  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** A completion or chat request, checked and with OpenAI's defaults applied. */
export interface ParsedRequest {
  endpoint: 'chat' | 'completions';
  model: string;
  /** Completions: a text or token ids. Chat: the messages. */
  prompt: { text: string } | { ids: number[] } | { messages: ChatMessage[] };
  n: number;
  /** Unset: 16 for completions (OpenAI's default), the rest of the context for chat. */
  maxTokens?: number;
  temperature: number;
  topP: number;
  seed?: number;
  stop: string[];
  stream: boolean;
  /** `stream_options.include_usage`: a last chunk with the usage. */
  includeUsage: boolean;
  /** Report log-probs: chat `logprobs: true`, completions `logprobs: k` (any k ≥ 0). */
  logprobs: boolean;
  /** Alternatives per token: chat `top_logprobs`, completions `logprobs`. */
  topLogprobs: number;
  /** vLLM's `return_token_ids`: `prompt_token_ids` and each choice's `token_ids` in the response. */
  returnTokenIds: boolean;
  /** vLLM's `return_tokens_as_token_ids`: log-prob tokens written `token_id:123`. */
  tokensAsTokenIds: boolean;
  /** The request's `metadata` (string values), for the gateway's episode fields. */
  metadata: Record<string, string>;
  /**
   * Chat with `tool_choice` `auto` (the default with tools), `required` or a named function: the
   * function tools the model may call, rendered by its template and read back from its answer.
   * Unset without tools or with `tool_choice: none` (neither rendered nor read, as vLLM does by default).
   */
  tools?: FunctionTool[];
  /**
   * Set with `tools`: `auto` (the model may call), `required` (it must call one of them) or
   * `{ name }` (it must call that function).
   */
  toolChoice?: ToolChoice;
  /** `parallel_tool_calls`: more than one call per answer (default true). */
  parallelToolCalls: boolean;
}

type Json = Record<string, unknown>;

/** Fields accepted with any valid value. */
const COMMON = [
  'model',
  'n',
  'max_tokens',
  'temperature',
  'top_p',
  'seed',
  'stop',
  'stream',
  'stream_options',
  'user',
  'metadata',
  'store',
  'return_token_ids',
  'return_tokens_as_token_ids',
];
const CHAT = [...COMMON, 'messages', 'max_completion_tokens', 'logprobs', 'top_logprobs', 'tools', 'tool_choice', 'parallel_tool_calls'];
const COMPLETIONS = [...COMMON, 'prompt', 'logprobs'];
/** Known OpenAI fields this server implements only at their neutral value; any other value is refused, never ignored. */
const NEUTRAL: Partial<Record<string, (v: unknown) => boolean>> = {
  frequency_penalty: (v) => v === 0,
  presence_penalty: (v) => v === 0,
  logit_bias: (v) => typeof v === 'object' && v !== null && Object.keys(v).length === 0,
  response_format: (v) => typeof v === 'object' && v !== null && (v as Json).type === 'text',
  echo: (v) => v === false,
  best_of: (v) => v === 1,
  suffix: (v) => v === '',
  tools: (v) => Array.isArray(v) && v.length === 0,
  tool_choice: (v) => v === 'none',
  parallel_tool_calls: () => true,
  service_tier: (v) => v === 'auto' || v === 'default',
};
const WHY_NOT: Record<string, string> = {
  tools: 'tools are for /v1/chat/completions',
  tool_choice: 'tools are for /v1/chat/completions',
  functions: 'function calls are not implemented',
  function_call: 'function calls are not implemented',
  response_format: 'structured output is not implemented; only {"type": "text"}',
  logit_bias: 'logit_bias is not implemented',
  frequency_penalty: "penalties are not implemented (the behaviour log-probs would no longer be the policy's); only 0",
  presence_penalty: "penalties are not implemented (the behaviour log-probs would no longer be the policy's); only 0",
  echo: 'echo is not implemented',
  best_of: 'best_of is not implemented; use n',
  suffix: 'suffix (insertion) is not implemented',
};

/** Parses a `/v1/chat/completions` or `/v1/completions` body. Throws {@link OpenAiError} (400) naming the parameter. */
export function parseRequest(endpoint: ParsedRequest['endpoint'], body: unknown): ParsedRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw bad('body', 'the request body must be a JSON object');
  const b = body as Json;
  const allowed = endpoint === 'chat' ? CHAT : COMPLETIONS;
  for (const [k, v] of Object.entries(b)) {
    if (allowed.includes(k) || v === null || v === undefined) continue;
    // Own keys only: a parameter named `constructor` or `__proto__` would find Object's.
    const neutral = Object.hasOwn(NEUTRAL, k) ? NEUTRAL[k] : undefined;
    if (neutral?.(v)) continue;
    const whyNot = Object.hasOwn(WHY_NOT, k) ? WHY_NOT[k] : undefined;
    if (neutral || whyNot !== undefined)
      throw new OpenAiError(
        400,
        `Unsupported parameter: '${k}': ${whyNot ?? 'only its default value is supported'} by this server.`,
        k,
        'unsupported_parameter',
      );
    throw new OpenAiError(400, `Unrecognized request argument supplied: ${k}`, k, 'unrecognized_argument');
  }
  const model = b.model;
  if (typeof model !== 'string' || model === '') throw bad('model', 'you must provide a model parameter (a policy id; GET /v1/models lists them)');
  const n = int(b, 'n', 1, 1, 128);
  const maxTokensField = endpoint === 'chat' && b.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
  const maxTokens = b[maxTokensField] == null ? (endpoint === 'completions' ? 16 : undefined) : int(b, maxTokensField, 16, 1, 1_000_000);
  const temperature = num(b, 'temperature', 1, 0, 2);
  const topP = num(b, 'top_p', 1, 0, 1);
  if (topP === 0) throw bad('top_p', 'must be greater than 0');
  const seed = b.seed == null ? undefined : int(b, 'seed', 0, -(2 ** 63), 2 ** 63);
  const stop = parseStop(b.stop);
  const stream = bool(b, 'stream', false);
  const so = b.stream_options;
  if (so != null && (typeof so !== 'object' || Array.isArray(so))) throw bad('stream_options', 'must be an object');
  if (so != null && !stream) throw bad('stream_options', 'is only allowed when stream is true');
  const includeUsage = so != null && (so as Json).include_usage === true;
  let logprobs = false;
  let topLogprobs = 0;
  if (endpoint === 'chat') {
    logprobs = bool(b, 'logprobs', false);
    topLogprobs = int(b, 'top_logprobs', 0, 0, 20);
    if (b.top_logprobs != null && !logprobs) throw bad('top_logprobs', 'requires logprobs to be true');
  } else if (b.logprobs != null) {
    topLogprobs = int(b, 'logprobs', 0, 0, 5);
    logprobs = true;
  }
  const metadata = parseMetadata(b.metadata);
  const given = endpoint === 'chat' ? parseTools(b.tools) : undefined;
  const toolChoice = parseToolChoice(b.tool_choice, given);
  const tools = toolChoice === 'none' ? undefined : given;
  const base = {
    endpoint,
    model,
    n,
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    temperature,
    topP,
    ...(seed !== undefined ? { seed } : {}),
    stop,
    stream,
    includeUsage,
    logprobs,
    topLogprobs,
    returnTokenIds: bool(b, 'return_token_ids', false),
    tokensAsTokenIds: bool(b, 'return_tokens_as_token_ids', false),
    metadata,
    ...(tools && toolChoice !== 'none' ? { tools, toolChoice } : {}),
    parallelToolCalls: bool(b, 'parallel_tool_calls', true),
  };
  if (endpoint === 'chat') return { ...base, prompt: { messages: parseMessages(b.messages) } };
  return { ...base, prompt: parsePrompt(b.prompt) };
}

function bad(param: string, problem: string): OpenAiError {
  return new OpenAiError(400, `${param}: ${problem}`, param, 'invalid_value');
}

function int(b: Json, k: string, dflt: number, min: number, max: number): number {
  const v = b[k];
  if (v == null) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw bad(k, `must be an integer, got ${JSON.stringify(v)}`);
  if (v < min || v > max) throw bad(k, `must be in [${min}, ${max}], got ${v}`);
  return v;
}

function num(b: Json, k: string, dflt: number, min: number, max: number): number {
  const v = b[k];
  if (v == null) return dflt;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw bad(k, `must be a number, got ${JSON.stringify(v)}`);
  if (v < min || v > max) throw bad(k, `must be in [${min}, ${max}], got ${v}`);
  return v;
}

function bool(b: Json, k: string, dflt: boolean): boolean {
  const v = b[k];
  if (v == null) return dflt;
  if (typeof v !== 'boolean') throw bad(k, `must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

function parseStop(v: unknown): string[] {
  if (v == null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.length > 4 || !list.every((s) => typeof s === 'string' && s.length > 0)) {
    throw bad('stop', 'must be a non-empty string or a list of at most 4 of them');
  }
  return list as string[];
}

function parseMetadata(v: unknown): Record<string, string> {
  if (v == null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw bad('metadata', 'must be an object of string values');
  const entries = Object.entries(v as Json);
  for (const [k, x] of entries) {
    if (typeof x !== 'string') throw bad(`metadata.${k}`, `must be a string, got ${JSON.stringify(x)}`);
  }
  // fromEntries defines own keys: an assignment would drop a `__proto__` key silently.
  return Object.fromEntries(entries) as Record<string, string>;
}

const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'];
/** OpenAI's bound on a request's tools, and its function-name pattern. */
const MAX_TOOLS = 128;
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

function parseMessages(v: unknown): ChatMessage[] {
  if (!Array.isArray(v) || v.length === 0) throw bad('messages', 'must be a non-empty list of {role, content}');
  const callNames = new Map<string, string>();
  return v.map((m, i) => {
    const p = `messages[${i}]`;
    if (typeof m !== 'object' || m === null) throw bad(p, 'must be an object with role and content');
    const { role, content, tool_calls: calls, tool_call_id: callId } = m as Json;
    if (typeof role !== 'string' || !ROLES.includes(role)) throw bad(`${p}.role`, `must be one of ${ROLES.join(', ')}, got ${JSON.stringify(role)}`);
    const message: ChatMessage = { role, content: '' };
    if (role === 'assistant' && calls != null) {
      message.tool_calls = parseMessageToolCalls(calls, `${p}.tool_calls`, callNames);
      // An assistant message that only calls tools has no content (null in OpenAI's shape).
      if (content == null) return message;
    }
    message.content = messageText(content, `${p}.content`);
    if (role === 'tool') {
      if (typeof callId !== 'string' || callId === '') throw bad(`${p}.tool_call_id`, 'a tool message must name the call it answers (tool_call_id)');
      message.tool_call_id = callId;
      const name = callNames.get(callId);
      if (name !== undefined) message.name = name;
    }
    return message;
  });
}

function messageText(content: unknown, p: string): string {
  if (typeof content === 'string') return content;
  if (
    Array.isArray(content) &&
    content.every((c) => typeof c === 'object' && c !== null && (c as Json).type === 'text' && typeof (c as Json).text === 'string')
  )
    return content.map((c) => (c as Json).text as string).join('');
  throw bad(p, 'must be a string or a list of {"type": "text", "text": ...} parts (images and audio are not supported)');
}

/** An assistant message's `tool_calls` (arguments a JSON text of an object), in the form chat templates take. */
function parseMessageToolCalls(v: unknown, p: string, names: Map<string, string>): TemplateToolCall[] {
  if (!Array.isArray(v) || v.length > MAX_TOOLS) throw bad(p, `must be a list of at most ${MAX_TOOLS} calls`);
  return v.map((c, j) => {
    const q = `${p}[${j}]`;
    const fn = typeof c === 'object' && c !== null ? ((c as Json).function as Json | undefined) : undefined;
    if (typeof fn !== 'object' || fn === null || typeof fn.name !== 'string') throw bad(q, 'must be {"type": "function", "function": {"name", "arguments"}}');
    let args: unknown;
    try {
      args = typeof fn.arguments === 'string' ? JSON.parse(fn.arguments) : fn.arguments;
    } catch {
      throw bad(`${q}.function.arguments`, 'must be the JSON text of an object');
    }
    if (typeof args !== 'object' || args === null || Array.isArray(args)) throw bad(`${q}.function.arguments`, 'must be the JSON text of an object');
    const id = (c as Json).id;
    if (typeof id === 'string') names.set(id, fn.name);
    return { type: 'function', function: { name: fn.name, arguments: args as Record<string, unknown> } };
  });
}

/** `tools`: function tools only, at most 128, names as OpenAI allows them; an empty list is none. */
function parseTools(v: unknown): FunctionTool[] | undefined {
  if (v == null) return undefined;
  if (!Array.isArray(v) || v.length > MAX_TOOLS) throw bad('tools', `must be a list of at most ${MAX_TOOLS} tools`);
  if (v.length === 0) return undefined;
  const seen = new Set<string>();
  return v.map((t, i) => {
    const p = `tools[${i}]`;
    if (typeof t !== 'object' || t === null || (t as Json).type !== 'function') throw bad(`${p}.type`, 'only "function" tools are supported');
    const fn = (t as Json).function as Json | undefined;
    if (typeof fn !== 'object' || fn === null || typeof fn.name !== 'string' || !TOOL_NAME.test(fn.name))
      throw bad(`${p}.function.name`, 'must be 1 to 64 letters, digits, underscores or dashes');
    if (seen.has(fn.name)) throw bad(`${p}.function.name`, `"${fn.name}" is named twice`);
    seen.add(fn.name);
    if (fn.description != null && typeof fn.description !== 'string') throw bad(`${p}.function.description`, 'must be a string');
    if (fn.parameters != null && (typeof fn.parameters !== 'object' || Array.isArray(fn.parameters)))
      throw bad(`${p}.function.parameters`, 'must be a JSON Schema object');
    if (fn.strict != null && typeof fn.strict !== 'boolean') throw bad(`${p}.function.strict`, 'must be true or false');
    return {
      type: 'function',
      function: {
        name: fn.name,
        ...(typeof fn.description === 'string' ? { description: fn.description } : {}),
        ...(fn.parameters != null ? { parameters: fn.parameters as Record<string, unknown> } : {}),
        ...(typeof fn.strict === 'boolean' ? { strict: fn.strict } : {}),
      },
    };
  });
}

/**
 * `tool_choice`: `auto` (the default with tools), `none`, `required`, or a named function
 * (`{"type": "function", "function": {"name": ...}}`, one of `tools`). Every choice but `none`
 * needs tools.
 */
function parseToolChoice(v: unknown, tools: FunctionTool[] | undefined): ToolChoice | 'none' {
  if (v == null) return tools ? 'auto' : 'none';
  if (v === 'none') return 'none';
  if (v !== 'auto' && v !== 'required' && !(typeof v === 'object' && v !== null && (v as Json).type === 'function'))
    throw bad('tool_choice', `must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}, got ${JSON.stringify(v)}`);
  const what = typeof v === 'string' ? `"${v}"` : 'a named function';
  if (!tools) throw bad('tool_choice', `${what} is only allowed when tools are given`);
  if (typeof v === 'string') return v;
  const fn = (v as Json).function as Json | undefined;
  const name = typeof fn === 'object' && fn !== null ? fn.name : undefined;
  if (typeof name !== 'string') throw bad('tool_choice.function.name', 'must be the name of one of the tools');
  if (!tools.some((t) => t.function.name === name)) throw bad('tool_choice.function.name', `"${name}" is not one of the tools`);
  return { name };
}

function parsePrompt(v: unknown): { text: string } | { ids: number[] } {
  if (typeof v === 'string') {
    if (v === '') throw bad('prompt', 'must not be empty');
    return { text: v };
  }
  if (Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t))) return { ids: v as number[] };
  if (Array.isArray(v) && v.length === 1 && typeof v[0] === 'string') return parsePrompt(v[0]);
  if (Array.isArray(v) && v.length === 1 && Array.isArray(v[0])) return parsePrompt(v[0]);
  if (Array.isArray(v) && v.length > 1) throw bad('prompt', 'a list of several prompts is not supported; send one request per prompt (or use n)');
  throw bad('prompt', 'must be a string or a list of token ids');
}
