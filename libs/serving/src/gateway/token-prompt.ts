import type { ChatMessage } from '@srpo/hf';
import { parseRequest, type ParsedRequest } from '../openai-protocol';
import type { HfTextCodec } from '../text-codec';
import { parseToolCalls, TOOL_CALL_OPEN, type FunctionTool, type ToolCall } from '../tool-calls';
import type { RecordedTurn } from './conversation-turns';

/*
 * Token prompts for later turns (SRPO_GATEWAY_TOKEN_PROMPTS): instead of the conversation's text,
 * which the upstream would tokenize again (and the earlier answers could come out as other ids
 * than those sampled), the gateway sends `/v1/completions` the ids itself, with the parent's
 * context and sampled tokens as they were, and answers the agent in the chat shape it asked for.
 */

type Json = Record<string, unknown>;

/** A chat request sent as a token prompt: the ids, and what the answer is read with. */
export interface TokenPromptPlan {
  ids: number[];
  tools?: FunctionTool[];
  parallelToolCalls: boolean;
}

/**
 * The ids of a chat request that continues `parent`: the parent's context and sampled response
 * as recorded, then what the template writes after the parent's answer (its end-of-turn, the
 * next messages, the generation prompt), tokenized as the upstream would.
 *
 * Undefined (the request goes as text, drift checked and counted) when it cannot be done
 * exactly: a request serve's parser refuses, `tool_choice` other than `auto` or `none` (a
 * forced call is the upstream's to open), log-probs asked for (their chat shape is not rebuilt),
 * no assistant message, a template whose rendering of the conversation so far is not a prefix
 * of the whole (in ids), or an answer the template does not end with an end token.
 */
export function tokenPromptOf(codec: HfTextCodec, body: Json, parent: RecordedTurn): TokenPromptPlan | undefined {
  let req: ParsedRequest;
  try {
    req = parseRequest('chat', body);
  } catch {
    return undefined;
  }
  if (!('messages' in req.prompt) || req.logprobs) return undefined;
  if (req.toolChoice !== undefined && req.toolChoice !== 'auto') return undefined;
  const messages: ChatMessage[] = req.prompt.messages;
  const k = lastIndexWhere(messages, (m) => m.role === 'assistant');
  if (k < 0) return undefined;
  let pre: number[], upto: number[], full: number[];
  try {
    pre = codec.chatIds(messages.slice(0, k), req.tools, true);
    upto = codec.chatIds(messages.slice(0, k + 1), req.tools, false);
    full = codec.chatIds(messages, req.tools, true);
  } catch {
    return undefined;
  }
  if (!startsWith(upto, pre) || !startsWith(full, upto)) return undefined;
  // The template's rendering of the parent's answer: its text as re-tokenized, then its end of turn.
  const answer = upto.slice(pre.length);
  const end = lastIndexWhere(answer, (t) => codec.stopIds.includes(t));
  if (end < 0) return undefined;
  const sampled = Array.from(parent.responseTokenIds);
  // A sampled end token stands for the template's; an answer cut by length gets the template's.
  const afterAnswer = codec.stopIds.includes(sampled[sampled.length - 1]) ? answer.slice(end + 1) : answer.slice(end);
  return {
    ids: [...Array.from(parent.contextTokenIds), ...sampled, ...afterAnswer, ...full.slice(upto.length)],
    ...(req.tools ? { tools: req.tools } : {}),
    parallelToolCalls: req.parallelToolCalls,
  };
}

/** The `/v1/completions` body that asks for a chat request's answer to `ids`. */
export function completionsBodyOf(chat: Json, ids: number[], model: string, tokenIds: boolean): Json {
  const up: Json = { model, prompt: ids, logprobs: 0 };
  for (const k of ['n', 'temperature', 'top_p', 'seed', 'stop', 'stream', 'stream_options', 'user']) if (chat[k] != null) up[k] = chat[k];
  const maxTokens = chat.max_completion_tokens ?? chat.max_tokens;
  if (maxTokens != null) up.max_tokens = maxTokens;
  if (tokenIds) up.return_token_ids = true;
  return up;
}

/** One choice's answer read from its text: the calls, or the text itself (a malformed call included). */
export function chatAnswerOf(
  text: string,
  finishReason: unknown,
  plan: TokenPromptPlan,
): { content: string | null; toolCalls?: ToolCall[]; finishReason: unknown } {
  const parsed = plan.tools ? parseToolCalls(text, plan.tools, { parallel: plan.parallelToolCalls }) : undefined;
  if (parsed) return { content: parsed.content, toolCalls: parsed.calls, finishReason: 'tool_calls' };
  return { content: text, finishReason };
}

/** A `text_completion` answer in the `chat.completion` shape; `token_ids` and `prompt_token_ids` stay for the recorder. */
export function chatCompletionOf(json: Json, plan: TokenPromptPlan): Json {
  const choices = Array.isArray(json.choices) ? (json.choices as Json[]) : [];
  return {
    ...json,
    id: typeof json.id === 'string' ? json.id.replace(/^cmpl-/, 'chatcmpl-') : json.id,
    object: 'chat.completion',
    choices: choices.map((c) => {
      const a = chatAnswerOf(typeof c.text === 'string' ? c.text : '', c.finish_reason, plan);
      const { text: _text, ...rest } = c;
      return {
        ...rest,
        message: { role: 'assistant', content: a.content, refusal: null, ...(a.toolCalls ? { tool_calls: a.toolCalls } : {}) },
        finish_reason: a.finishReason,
      };
    }),
  };
}

/**
 * Streamed `text_completion` chunks as `chat.completion.chunk`s. Text goes out as it comes; with
 * tools, from `<tool_call>` on it is held, and at the choice's finish the calls go out in one
 * delta (or, if they do not parse, the held text), as srpo serve streams them.
 */
export class ChatChunkTranslator {
  private readonly texts = new Map<number, { all: string; sent: number; started: boolean }>();
  private readonly answers = new Map<number, { content: string | null; toolCalls?: ToolCall[] }>();

  constructor(private readonly plan: TokenPromptPlan) {}

  /** The chat chunk for an upstream chunk (ids and log-probs kept for the recorder). */
  translate(chunk: Json): Json {
    const choices = Array.isArray(chunk.choices) ? (chunk.choices as Json[]) : [];
    return {
      ...chunk,
      id: typeof chunk.id === 'string' ? chunk.id.replace(/^cmpl-/, 'chatcmpl-') : chunk.id,
      object: 'chat.completion.chunk',
      choices: choices.map((c) => this.choice(c)),
    };
  }

  /** The answers as the agent got them, by choice index: what a later turn echoes. */
  answer(index: number): { content: string | null; toolCalls?: ToolCall[] } | undefined {
    return this.answers.get(index);
  }

  private choice(c: Json): Json {
    const index = typeof c.index === 'number' ? c.index : 0;
    const st = this.texts.get(index) ?? { all: '', sent: 0, started: false };
    this.texts.set(index, st);
    if (typeof c.text === 'string') st.all += c.text;
    const { text: _text, ...rest } = c;
    const delta: Json = st.started ? {} : { role: 'assistant' };
    st.started = true;
    if (c.finish_reason != null) {
      const a = chatAnswerOf(st.all, c.finish_reason, this.plan);
      this.answers.set(index, a.toolCalls ? { content: a.content, toolCalls: a.toolCalls } : { content: st.all });
      if (a.toolCalls) delta.tool_calls = a.toolCalls.map((call, i) => ({ index: i, ...call }));
      else if (st.all.length > st.sent) delta.content = st.all.slice(st.sent);
      st.sent = st.all.length;
      return { ...rest, delta, finish_reason: a.finishReason };
    }
    const safe = this.plan.tools ? heldFrom(st.all) : st.all.length;
    if (safe > st.sent) delta.content = st.all.slice(st.sent, safe);
    st.sent = Math.max(st.sent, safe);
    return { ...rest, delta, finish_reason: null };
  }
}

/** How much of `text` may go out before a call: up to `<tool_call>`, or to a suffix that may begin one. */
function heldFrom(text: string): number {
  const open = text.indexOf(TOOL_CALL_OPEN);
  if (open >= 0) return open;
  for (let n = Math.min(TOOL_CALL_OPEN.length - 1, text.length); n > 0; n--) if (text.endsWith(TOOL_CALL_OPEN.slice(0, n))) return text.length - n;
  return text.length;
}

function startsWith(a: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > a.length) return false;
  for (let i = 0; i < prefix.length; i++) if (a[i] !== prefix[i]) return false;
  return true;
}

function lastIndexWhere<T>(xs: readonly T[], f: (x: T) => boolean): number {
  for (let i = xs.length - 1; i >= 0; i--) if (f(xs[i])) return i;
  return -1;
}
