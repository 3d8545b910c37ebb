import { createHash } from 'crypto';
import type { AgentOutputInit } from '@srpo/events';
import { OpenAiError } from '../openai-protocol';
import { TOOL_CALL_OPEN } from '../tool-calls';
import { callOfJson, tokenDriftOf, type AssistantReply, type TurnPlace } from './conversation-turns';
import { outputIdOf, type EpisodeFields } from './episode-fields';

/** One choice of an upstream completion, in the form both endpoints (and streaming) reduce to. */
export interface UpstreamChoice {
  index: number;
  text: string;
  /** `token_ids` as srpo serve and vLLM (`return_token_ids`) send them. */
  tokenIds?: number[];
  /** The log-prob entries' `token` strings (`token_id:N` with vLLM's `return_tokens_as_token_ids`). */
  tokens: string[];
  /** The sampled tokens' log-probs; undefined when the upstream sent none. */
  logprobs?: number[];
  /** The upstream answered with tool calls (its parser took their text out of `content`). */
  toolCalls?: boolean;
  /** The calls, as a later turn's messages echo them. */
  calls?: AssistantReply['calls'];
}

/** An upstream completion reduced to what is recorded. */
export interface UpstreamCompletion {
  promptTokenIds?: number[];
  systemFingerprint?: string;
  choices: UpstreamChoice[];
}

/** Re-tokenizes with the model's tokenizer where an upstream returns no ids. */
export interface Retokenizer {
  /** The prompt's ids: the chat template applied to the messages, or the completion prompt encoded. */
  prompt(body: Record<string, unknown>): number[];
  text(text: string): number[];
}

type Json = Record<string, unknown>;

/** Reduces a non-streaming `chat.completion` or `text_completion` body. */
export function upstreamCompletionOf(body: Json): UpstreamCompletion {
  const choices = Array.isArray(body.choices) ? (body.choices as Json[]) : [];
  return {
    promptTokenIds: intArray(body.prompt_token_ids),
    systemFingerprint: typeof body.system_fingerprint === 'string' ? body.system_fingerprint : undefined,
    choices: choices.map((c, i) => {
      const lp = c.logprobs as Json | null | undefined;
      const chat = lp && Array.isArray(lp.content) ? (lp.content as Json[]) : undefined;
      const text =
        typeof c.text === 'string' ? c.text : typeof (c.message as Json | undefined)?.content === 'string' ? ((c.message as Json).content as string) : '';
      const calls = (c.message as Json | undefined)?.tool_calls;
      return {
        index: typeof c.index === 'number' ? c.index : i,
        ...(Array.isArray(calls) && calls.length > 0 ? { toolCalls: true, calls: (calls as Json[]).map(callOfJson) } : {}),
        text,
        tokenIds: intArray(c.token_ids),
        tokens: chat ? chat.map((e) => String(e.token)) : Array.isArray(lp?.tokens) ? (lp?.tokens as unknown[]).map(String) : [],
        logprobs: chat ? chat.map((e) => Number(e.logprob)) : Array.isArray(lp?.token_logprobs) ? (lp?.token_logprobs as unknown[]).map(Number) : undefined,
      };
    }),
  };
}

/**
 * Folds streamed chunks into an {@link UpstreamCompletion}: text, log-prob entries and
 * token ids per choice, the prompt ids from whichever chunk carries them.
 */
export class StreamAccumulator {
  private readonly choices = new Map<number, UpstreamChoice & { logprobs: number[] }>();
  private promptTokenIds?: number[];
  private fingerprint?: string;
  private sawLogprobs = new Set<number>();

  add(chunk: Json): void {
    this.promptTokenIds ??= intArray(chunk.prompt_token_ids);
    if (typeof chunk.system_fingerprint === 'string') this.fingerprint ??= chunk.system_fingerprint;
    for (const c of Array.isArray(chunk.choices) ? (chunk.choices as Json[]) : []) {
      const index = typeof c.index === 'number' ? c.index : 0;
      let acc = this.choices.get(index);
      if (!acc) {
        acc = { index, text: '', tokens: [], logprobs: [] };
        this.choices.set(index, acc);
      }
      const delta = c.delta as Json | undefined;
      if (typeof c.text === 'string') acc.text += c.text;
      if (typeof delta?.content === 'string') acc.text += delta.content;
      if (Array.isArray(delta?.tool_calls) && delta.tool_calls.length > 0) {
        acc.toolCalls = true;
        addCallDeltas((acc.calls ??= []), delta.tool_calls as Json[]);
      }
      const ids = intArray(c.token_ids);
      if (ids) acc.tokenIds = [...(acc.tokenIds ?? []), ...ids];
      const lp = c.logprobs as Json | null | undefined;
      if (lp && Array.isArray(lp.content)) {
        this.sawLogprobs.add(index);
        for (const e of lp.content as Json[]) {
          acc.tokens.push(String(e.token));
          acc.logprobs.push(Number(e.logprob));
        }
      } else if (lp && Array.isArray(lp.token_logprobs)) {
        this.sawLogprobs.add(index);
        acc.tokens.push(...((lp.tokens as unknown[]) ?? []).map(String));
        acc.logprobs.push(...(lp.token_logprobs as unknown[]).map(Number));
      }
    }
  }

  result(): UpstreamCompletion {
    return {
      promptTokenIds: this.promptTokenIds,
      systemFingerprint: this.fingerprint,
      choices: [...this.choices.values()]
        .sort((a, b) => a.index - b.index)
        .map((c) => ({ ...c, logprobs: this.sawLogprobs.has(c.index) ? c.logprobs : undefined })),
    };
  }
}

/**
 * The policy version an upstream reports: srpo serve's `x-srpo-policy-version: <id>@<n>` header,
 * else a `system_fingerprint` of the form `srpo-<id>-v<n>`, else `fallback` (a fixed or announced
 * version the operator configured), else refused: a recorded output must name its version.
 */
export function policyVersionOf(
  policyId: string,
  header: string | undefined,
  fingerprint: string | undefined,
  fallback?: (policyId: string) => number | undefined,
): number {
  const h = header ? /^(.+)@(\d+)$/.exec(header) : null;
  if (h && h[1] === policyId) return Number(h[2]);
  const f = fingerprint ? /^srpo-(.+)-v(\d+)$/.exec(fingerprint) : null;
  if (f && f[1] === policyId) return Number(f[2]);
  const v = fallback?.(policyId);
  if (v !== undefined) return v;
  throw new OpenAiError(
    502,
    `the upstream reported no version of policy '${policyId}' (x-srpo-policy-version header or system_fingerprint srpo-${policyId}-vN); configure SRPO_GATEWAY_VERSION for an upstream that cannot`,
    null,
    'upstream_no_version',
  );
}

export interface RecordContext {
  fields: EpisodeFields;
  /** The request's turn and parent in its conversation; unset: turn 0, no parent. */
  place?: TurnPlace;
  policyId: string;
  policyVersion: number;
  requestBody: Json;
  temperature: number;
  maxTokens?: number;
  seed?: number;
  startedAtMs: number;
  finishedAtMs: number;
  retokenizer?: Retokenizer;
}

/**
 * One AgentOutput per choice. Ids come from the upstream (`token_ids` and `prompt_token_ids`,
 * or `token_id:N` log-prob tokens); failing that, the retokenizer's, marked `retokenized`, and
 * only when they match the upstream's log-prob count. An upstream without log-probs is refused:
 * nothing is recorded with made-up numbers.
 */
export function recordedOutputs(up: UpstreamCompletion, ctx: RecordContext): AgentOutputInit[] {
  const n = up.choices.length;
  if (n === 0) throw upstreamError('the upstream returned no choices');
  return up.choices.map((c) => {
    if (!c.logprobs || c.logprobs.length === 0)
      throw upstreamError(
        `choice ${c.index}: the upstream returned no log-probs; the gateway asks for them (logprobs) and records nothing without them`,
        'upstream_no_logprobs',
      );
    let origin: 'sampled' | 'retokenized' = 'sampled';
    let response = c.tokenIds ?? idsFromTokens(c.tokens);
    let context = up.promptTokenIds;
    if (!response || !context) {
      // A parser took the calls' text out of the answer: what was sampled cannot be rebuilt from them.
      if (!response && c.toolCalls)
        throw upstreamError(
          `choice ${c.index}: the upstream answered with tool calls and no token ids; the calls' sampled text cannot be re-tokenized from them (ask for return_token_ids: vLLM >= 0.10.2 and srpo serve return them)`,
          'upstream_no_token_ids',
        );
      if (!ctx.retokenizer)
        throw upstreamError(
          `choice ${c.index}: the upstream returned no token ids (return_token_ids) and SRPO_GATEWAY_TOKENIZER_DIR is not set to re-tokenize`,
          'upstream_no_token_ids',
        );
      origin = 'retokenized';
      response ??= ctx.retokenizer.text(c.text);
      context ??= ctx.retokenizer.prompt(ctx.requestBody);
    }
    if (response.length !== c.logprobs.length) {
      throw upstreamError(
        `choice ${c.index}: ${response.length} token ids${origin === 'retokenized' ? ' after re-tokenizing' : ''} but ${c.logprobs.length} log-probs`,
        'upstream_token_mismatch',
      );
    }
    const parent = ctx.place?.parent;
    return {
      outputId: outputIdOf(ctx.fields, c.index, n, ctx.place?.turn ?? 0),
      episodeId: ctx.fields.episodeId,
      step: ctx.fields.step,
      agentId: ctx.fields.agentId,
      role: ctx.fields.role,
      policyId: ctx.policyId,
      policyVersion: ctx.policyVersion,
      contextRef: `ctx:${createHash('sha256').update(context.join(',')).digest('hex').slice(0, 16)}`,
      contextTokenIds: context,
      responseTokenIds: response,
      // float32 rounding can put a log-prob of ~0 a hair above it.
      behaviourLogProbs: c.logprobs.map((lp) => Math.min(lp, 0)),
      lossMask: response.map(() => true),
      sampling: { temperature: ctx.temperature, topK: 0, maxNewTokens: ctx.maxTokens ?? response.length, seed: ctx.seed ?? null, stopTokenIds: [] },
      startedAtMs: ctx.startedAtMs,
      eventTimeMs: ctx.finishedAtMs,
      tokenIdOrigin: origin,
      turn: ctx.place?.turn ?? 0,
      parentOutputId: parent?.outputId ?? ctx.place?.parentOutputId ?? null,
      tokenDrift: parent ? tokenDriftOf(parent, context) : null,
      malformedToolCall: malformedToolCall(ctx.requestBody, c),
      subjectId: ctx.fields.subjectId ?? null,
    };
  });
}

/**
 * A choice of a request that offered tools, answered as text holding a call's opening tag: the
 * model wrote a call that did not parse (srpo serve and vLLM's parsers then answer the text).
 */
function malformedToolCall(body: Json, c: UpstreamChoice): boolean {
  const offered = Array.isArray(body.tools) && body.tools.length > 0 && body.tool_choice !== 'none';
  return offered && !c.toolCalls && c.text.includes(TOOL_CALL_OPEN);
}

/** The answer of a choice as a later turn's `messages` echo it. */
export function replyOf(c: UpstreamChoice): AssistantReply {
  return { content: c.text, calls: c.calls ?? [] };
}

/** Streamed calls come in pieces by `index`: the name once, the arguments' text in parts. */
function addCallDeltas(calls: { name: string; arguments: string }[], deltas: Json[]): void {
  for (const d of deltas) {
    const i = typeof d.index === 'number' && d.index >= 0 && d.index < 1024 ? d.index : calls.length;
    const fn = (d.function ?? {}) as Json;
    calls[i] ??= { name: '', arguments: '' };
    if (typeof fn.name === 'string') calls[i].name += fn.name;
    if (typeof fn.arguments === 'string') calls[i].arguments += fn.arguments;
  }
}

function idsFromTokens(tokens: readonly string[]): number[] | undefined {
  if (tokens.length === 0 || !tokens.every((t) => /^token_id:\d+$/.test(t))) return undefined;
  return tokens.map((t) => Number(t.slice('token_id:'.length)));
}

function intArray(v: unknown): number[] | undefined {
  return Array.isArray(v) && v.every((x) => Number.isInteger(x)) ? (v as number[]) : undefined;
}

function upstreamError(message: string, code = 'upstream_invalid'): OpenAiError {
  return new OpenAiError(502, message, null, code, 'upstream_error');
}
