import OpenAI from 'openai';
import type { EpisodeOutcomeInit, TransitionInit } from '@srpo/events';
import type { ChatMessage, ChatReply, ChatRequest, TextAgentClient } from '@srpo/workflows';

/**
 * The LLM demo's HTTP side: the word-problem workflow of `@srpo/workflows` bound to `srpo gateway`
 * (recorded play) and to `srpo serve` itself (greedy held-out evaluation) with the official
 * `openai` client, and the learner's version list. The episode logic stays in the library.
 */

/**
 * Aborts every request in flight at once (the demo's Ctrl-C). Each request gets a signal of its
 * own, dropped when it settles: one signal shared by every request of a long run would collect
 * an abort listener per request (the `openai` client never removes its own).
 */
export class RequestScope {
  private readonly live = new Set<AbortController>();
  private aborted = false;

  async run<T>(request: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    if (this.aborted) controller.abort();
    this.live.add(controller);
    try {
      return await request(controller.signal);
    } finally {
      this.live.delete(controller);
    }
  }

  abort(): void {
    this.aborted = true;
    for (const c of this.live) c.abort();
  }

  /** Requests in flight now. */
  get size(): number {
    return this.live.size;
  }
}

/** The body's `srpo` field the gateway adds to each completion. */
interface SrpoField {
  output_ids: string[];
  policy_version: number;
}

/**
 * The gateway client: recorded chat completions (n = 1 per episode: the gateway records all
 * choices of one request under one episode) and the /v1/srpo routes for transitions and outcomes.
 * `scope` aborts every request in flight (the demo's Ctrl-C).
 */
export function gatewayClient(baseUrl: string, apiKey: string, model: string, scope = new RequestScope()): TextAgentClient {
  const base = baseUrl.replace(/\/$/, '');
  const post = (route: string, body: unknown): Promise<void> =>
    scope.run(async (signal) => {
      const res = await fetch(`${base}/srpo/${route}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
        body: JSON.stringify(body),
        signal,
      });
      if (!res.ok) throw new Error(`POST /v1/srpo/${route}: ${res.status} ${await res.text()}`);
    });
  const openai = new OpenAI({ baseURL: base, apiKey, maxRetries: 2 });
  return {
    async chat(r: ChatRequest): Promise<ChatReply> {
      const res = await scope.run((signal) =>
        openai.chat.completions.create(
          { model, messages: r.messages, temperature: r.temperature, max_tokens: r.maxTokens },
          {
            headers: { 'X-SRPO-Episode': r.episodeId, 'X-SRPO-Step': String(r.step), 'X-SRPO-Role': r.role, 'X-SRPO-Agent': r.agentId },
            signal,
          },
        ),
      );
      const srpo = (res as unknown as { srpo?: SrpoField }).srpo;
      if (!srpo) throw new Error(`the response has no srpo field: is ${base} the gateway?`);
      return { text: res.choices[0]?.message.content ?? '', outputIds: srpo.output_ids, policyVersion: srpo.policy_version };
    },
    recordTransition: (t: TransitionInit) => post('transitions', t),
    recordOutcome: (o: EpisodeOutcomeInit) => post('outcomes', o),
  };
}

/** A greedy reply and the policy version that wrote it (undefined when the server did not say). */
export interface GreedyReply {
  text: string;
  version: number | undefined;
}

export type GreedyAnswerer = (messages: ChatMessage[]) => Promise<GreedyReply>;

/**
 * The version a `system_fingerprint` names for `policy`: srpo serve answers `srpo-<policy>-v<N>`.
 * Anything else (another policy, another server) is undefined.
 */
export function versionOfFingerprint(fingerprint: string | null | undefined, policy: string): number | undefined {
  if (typeof fingerprint !== 'string' || !fingerprint.startsWith(`srpo-${policy}-v`)) return undefined;
  const rest = fingerprint.slice(`srpo-${policy}-v`.length);
  return /^\d+$/.test(rest) && Number.isSafeInteger(Number(rest)) ? Number(rest) : undefined;
}

/**
 * Greedy replies from the server itself, not the gateway: temperature 0 is refused by the
 * gateway (nothing to train on), and an evaluation must not be recorded as training data.
 */
export function greedyAnswerer(serveUrl: string, apiKey: string, model: string, maxTokens: number, scope = new RequestScope()): GreedyAnswerer {
  const openai = new OpenAI({ baseURL: serveUrl.replace(/\/$/, ''), apiKey, maxRetries: 2 });
  return async (messages) => {
    const res = await scope.run((signal) => openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: maxTokens }, { signal }));
    return { text: res.choices[0]?.message.content ?? '', version: versionOfFingerprint(res.system_fingerprint, model) };
  };
}

/**
 * The versions the learner has published for `policy` (`GET /policies/<id>/versions`, version 0
 * included), or undefined when it does not answer (not up yet, or going down).
 */
export async function learnerVersionCount(learnerUrl: string, policy: string, timeoutMs = 5000): Promise<number | undefined> {
  try {
    const res = await fetch(`${learnerUrl.replace(/\/$/, '')}/policies/${encodeURIComponent(policy)}/versions`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) {
      await res.body?.cancel();
      return undefined;
    }
    const body: unknown = await res.json();
    return Array.isArray(body) ? body.length : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The version srpo serve serves `policy` at (`GET /v1/models`, each model's `srpo.version`), for
 * pacing; on an error or an unknown policy, the last one it read (0 before the first).
 */
export function servedVersionReader(serveUrl: string, apiKey: string, policy: string, timeoutMs = 5000): () => Promise<number> {
  let last = 0;
  const url = `${serveUrl.replace(/\/$/, '')}/models`;
  return async () => {
    try {
      const res = await fetch(url, { headers: { authorization: `Bearer ${apiKey}` }, signal: AbortSignal.timeout(timeoutMs) });
      if (!res.ok) {
        await res.body?.cancel();
        return last;
      }
      const body = (await res.json()) as { data?: { id?: unknown; srpo?: { version?: unknown } }[] };
      const version = body.data?.find((m) => m.id === policy)?.srpo?.version;
      if (typeof version === 'number' && Number.isSafeInteger(version)) last = version;
    } catch {
      // Serve is busy or going down: the last version read stands.
    }
    return last;
  };
}
