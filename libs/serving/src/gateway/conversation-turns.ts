import { createHash } from 'crypto';
import { ValidationError } from '@srpo/core';
import type { EpisodeFields } from './episode-fields';

type Json = Record<string, unknown>;

/** An assistant answer as a later request's `messages` echo it: its text and its calls. */
export interface AssistantReply {
  content: string;
  calls: { name: string; arguments: string }[];
}

/** What a later turn needs of a recorded output: its id and the tokens it was conditioned on and sampled. */
export interface RecordedTurn {
  outputId: string;
  contextTokenIds: Int32Array;
  responseTokenIds: Int32Array;
}

/** Where a new output sits in its conversation. */
export interface TurnPlace {
  turn: number;
  /** The recorded output whose answer the request's messages continue. */
  parent?: RecordedTurn;
  /** A parent named by `X-SRPO-Parent-Output` that the gateway no longer (or never) held: linked, not checked. */
  parentOutputId?: string;
}

export interface ConversationTurnsOptions {
  /** Conversations (episode, step, agent) remembered at most; past it the least recently used is forgotten. */
  maxConversations: number;
  /** Token ids held at most over all remembered turns (4 bytes each); past it the least recently used conversations go. */
  maxHeldTokens: number;
  /** Answers remembered per conversation (the latest ones): a request continues one of them. */
  maxTurnsPerConversation: number;
  /** A conversation untouched this long is forgotten. */
  idleTtlMs: number;
  clock?: () => number;
}

export const DEFAULT_CONVERSATION_TURNS: ConversationTurnsOptions = {
  maxConversations: 20_000,
  maxHeldTokens: 8_000_000,
  maxTurnsPerConversation: 8,
  idleTtlMs: 3_600_000,
};

interface Conversation {
  /** Turns numbered so far: the next request's turn. */
  next: number;
  /** digest of (messages before the answer, the answer) → the output that gave the answer; insertion order is age. */
  answers: Map<string, RecordedTurn>;
  byId: Map<string, RecordedTurn>;
  tokens: number;
  touchedAtMs: number;
}

/**
 * The turns of multi-turn conversations as the gateway records them. An agent that talks to a
 * policy several times at one step (a tool loop, a chat) sends the same episode headers each
 * time; each request becomes its own output, numbered by `turn` (0, 1, ...) within
 * (episode, step, agent), and linked to the output whose answer its `messages` continue: the
 * latest assistant message of the request, with everything before it, must equal a recorded
 * request's messages followed by that output's answer (content and calls, compared as JSON).
 *
 * Memory is bounded and in the process: an LRU of conversations, a bound on the token ids held
 * (the parent's context and response, for the drift check), and the latest answers of each.
 * A forgotten conversation, and every one after a restart, starts again at turn 0 unless the
 * client names its turn and parent (`X-SRPO-Turn`, `X-SRPO-Parent-Output`).
 */
export class ConversationTurns {
  private readonly conversations = new Map<string, Conversation>();
  private heldTokens = 0;
  private readonly clock: () => number;

  constructor(private readonly o: ConversationTurnsOptions = DEFAULT_CONVERSATION_TURNS) {
    for (const k of ['maxConversations', 'maxHeldTokens', 'maxTurnsPerConversation', 'idleTtlMs'] as const)
      if (!(o[k] >= 1)) throw new ValidationError(k, `must be at least 1, got ${o[k]}`);
    this.clock = o.clock ?? Date.now;
  }

  get size(): number {
    return this.conversations.size;
  }

  /**
   * Numbers a request's outputs and finds its parent. `explicit` (from headers) wins: a turn
   * named by the client is taken as is (the counter moves past it), a named parent is looked up.
   * Called once per recorded request, after the upstream answered, so concurrent requests of
   * a conversation get distinct turns.
   */
  place(fields: EpisodeFields, messages: unknown, explicit: { turn?: number; parentOutputId?: string } = {}): TurnPlace {
    const now = this.clock();
    this.expire(now);
    const conv = this.touch(keyOf(fields), now);
    const turn = explicit.turn ?? conv.next;
    conv.next = Math.max(conv.next, turn + 1);
    const parent = explicit.parentOutputId !== undefined ? conv.byId.get(explicit.parentOutputId) : this.parentOf(conv, messages);
    if (parent) return { turn, parent };
    return explicit.parentOutputId !== undefined ? { turn, parentOutputId: explicit.parentOutputId } : { turn };
  }

  /** The parent {@link place} would find now, without numbering anything (for a token prompt, before the upstream is asked). */
  parent(fields: EpisodeFields, messages: unknown, explicitParent?: string): RecordedTurn | undefined {
    const conv = this.conversations.get(keyOf(fields));
    if (!conv) return undefined;
    return explicitParent !== undefined ? conv.byId.get(explicitParent) : this.parentOf(conv, messages);
  }

  /** Remembers an output's answer to `messages`, for the request that continues it. */
  remember(
    fields: EpisodeFields,
    messages: unknown,
    reply: AssistantReply,
    turn: { outputId: string; contextTokenIds: number[]; responseTokenIds: number[] },
  ): void {
    if (!Array.isArray(messages)) return;
    const conv = this.touch(keyOf(fields), this.clock());
    const rec: RecordedTurn = {
      outputId: turn.outputId,
      contextTokenIds: Int32Array.from(turn.contextTokenIds),
      responseTokenIds: Int32Array.from(turn.responseTokenIds),
    };
    const size = rec.contextTokenIds.length + rec.responseTokenIds.length;
    if (size > this.o.maxHeldTokens) return;
    conv.answers.set(digestOf([...messages.map(messageKey), replyKey(reply)]), rec);
    conv.byId.set(rec.outputId, rec);
    conv.tokens += size;
    this.heldTokens += size;
    while (conv.answers.size > this.o.maxTurnsPerConversation) {
      const [digest, old] = conv.answers.entries().next().value as [string, RecordedTurn];
      conv.answers.delete(digest);
      this.drop(conv, old);
    }
    for (const [key, c] of this.conversations) {
      if (this.heldTokens <= this.o.maxHeldTokens || c === conv) break;
      this.forget(key, c);
    }
  }

  /** The output answered by the request's latest assistant message, if it is remembered. */
  private parentOf(conv: Conversation, messages: unknown): RecordedTurn | undefined {
    if (!Array.isArray(messages) || conv.answers.size === 0) return undefined;
    for (let k = messages.length - 1; k >= 0; k--) {
      const m = messages[k] as Json | null;
      if (typeof m !== 'object' || m === null || m.role !== 'assistant') continue;
      const reply = replyOfMessage(m);
      return conv.answers.get(digestOf([...messages.slice(0, k).map(messageKey), replyKey(reply)]));
    }
    return undefined;
  }

  private touch(key: string, now: number): Conversation {
    const conv = this.conversations.get(key) ?? { next: 0, answers: new Map(), byId: new Map(), tokens: 0, touchedAtMs: now };
    conv.touchedAtMs = now;
    this.conversations.delete(key);
    this.conversations.set(key, conv);
    if (this.conversations.size > this.o.maxConversations) {
      const [oldKey, old] = this.conversations.entries().next().value as [string, Conversation];
      this.forget(oldKey, old);
    }
    return conv;
  }

  private drop(conv: Conversation, rec: RecordedTurn): void {
    conv.byId.delete(rec.outputId);
    const size = rec.contextTokenIds.length + rec.responseTokenIds.length;
    conv.tokens -= size;
    this.heldTokens -= size;
  }

  private forget(key: string, conv: Conversation): void {
    this.conversations.delete(key);
    this.heldTokens -= conv.tokens;
  }

  /** Idle conversations sit at the front of the LRU order: this stops at the first live one. */
  private expire(now: number): void {
    for (const [key, conv] of this.conversations) {
      if (now - conv.touchedAtMs < this.o.idleTtlMs) return;
      this.forget(key, conv);
    }
  }
}

/**
 * Whether `contextTokenIds` (a turn's prompt) lost its parent's tokens: it must start with the
 * parent's context followed by the parent's sampled response. The response's last token is
 * allowed to differ (an end token the template writes as its own end-of-turn token); every
 * other sampled token must be there, as sampled. True is drift: the earlier turn's text was
 * tokenized differently from what the model sampled, so the trained context is not the one the
 * policy saw when it sampled the parent; the gateway records it and counts it.
 */
export function tokenDriftOf(parent: RecordedTurn, contextTokenIds: readonly number[]): boolean {
  const ctx = parent.contextTokenIds;
  const resp = parent.responseTokenIds;
  const compared = resp.length > 0 ? resp.length - 1 : 0;
  if (contextTokenIds.length < ctx.length + compared) return true;
  for (let i = 0; i < ctx.length; i++) if (contextTokenIds[i] !== ctx[i]) return true;
  for (let i = 0; i < compared; i++) if (contextTokenIds[ctx.length + i] !== resp[i]) return true;
  return false;
}

/**
 * One OpenAI `tool_calls` entry (of an answer, or of a request's assistant message) as a reply's
 * call: its name, and its arguments as text (an object some clients send is written as JSON).
 */
export function callOfJson(c: Json | null | undefined): AssistantReply['calls'][number] {
  const fn = (c?.function ?? {}) as Json;
  return {
    name: typeof fn.name === 'string' ? fn.name : '',
    arguments: typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
  };
}

/** An assistant message of a request, as {@link AssistantReply}. */
function replyOfMessage(m: Json): AssistantReply {
  const content = typeof m.content === 'string' ? m.content : Array.isArray(m.content) ? textOfParts(m.content) : '';
  return { content, calls: Array.isArray(m.tool_calls) ? (m.tool_calls as Json[]).map(callOfJson) : [] };
}

function textOfParts(parts: unknown[]): string {
  return parts.map((p) => (typeof p === 'object' && p !== null && typeof (p as Json).text === 'string' ? ((p as Json).text as string) : '')).join('');
}

/** A request message as compared: role, text and calls; ids and other fields a client may rewrite are left out. */
function messageKey(m: unknown): unknown {
  if (typeof m !== 'object' || m === null) return m;
  const msg = m as Json;
  if (msg.role === 'assistant') return replyKey(replyOfMessage(msg));
  const content = typeof msg.content === 'string' ? msg.content : Array.isArray(msg.content) ? textOfParts(msg.content) : msg.content;
  return { role: msg.role, content, ...(typeof msg.name === 'string' ? { name: msg.name } : {}) };
}

function replyKey(r: AssistantReply): unknown {
  return { role: 'assistant', content: r.content, calls: r.calls.map((c) => [c.name, canonicalArguments(c.arguments)]) };
}

/** Arguments compared as JSON values where they parse (a client may re-serialize them), else as text. */
function canonicalArguments(text: string): string {
  try {
    return stableJson(JSON.parse(text));
  } catch {
    return text;
  }
}

function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(',')}]`;
  if (typeof v === 'object' && v !== null)
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${stableJson((v as Json)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}

function digestOf(v: unknown): string {
  return createHash('sha256').update(JSON.stringify(v)).digest('hex');
}

function keyOf(f: EpisodeFields): string {
  return `${f.episodeId}\u0000${f.step}\u0000${f.agentId}`;
}
