import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import { retry } from '@srpo/core';
import { ConcurrencyLimit } from './concurrency-limit';
import { JudgeFailure } from './judge-errors';

export interface JudgeClientOptions {
  /** The endpoint's OpenAI base URL, `https://host/v1`: the client posts to `<baseUrl>/chat/completions`. */
  baseUrl: string;
  model: string;
  /** Sent as `Authorization: Bearer`; never logged or recorded. */
  apiKey?: string;
  /** Longest wait for one whole answer, headers and body (ms). */
  timeoutMs: number;
  /** Requests in flight at once. */
  concurrency: number;
  /** `max_tokens` of each request. */
  maxTokens: number;
  /** `temperature` of each request (0: the same text scores the same on the same judge). */
  temperature: number;
  /** Wait before the one retry of a retriable failure (default 500 ms). */
  retryDelayMs?: number;
}

/** A judge's answer and which judge gave it. */
export interface JudgeAnswer {
  content: string;
  /** The `model` the endpoint says answered (a dated snapshot may stand behind an alias). */
  model: string;
  /** `system_fingerprint` when the endpoint sends one: the backend configuration that answered. */
  systemFingerprint: string | undefined;
}

/** What a judge call needs: a test may stand a scripted one in for {@link JudgeClient}. */
export interface ChatJudge {
  ask(prompt: string): Promise<JudgeAnswer>;
}

/**
 * Asks any OpenAI-compatible `POST /v1/chat/completions` endpoint (OpenAI, vLLM, SGLang,
 * `srpo serve`) with the official `openai` client. Each request is bounded by `timeoutMs` (the
 * client's own timeout and an abort signal, so a server that sends headers and then stalls the
 * body is cut off too); at most `concurrency` are in flight. A refused or reset connection, 429
 * or 502-504 is retried once through the project's retrier (`retry` of @srpo/core); everything
 * else fails at once as a {@link JudgeFailure} naming the reason, so a sick judge costs one
 * counted failure per output, never a retry storm.
 */
export class JudgeClient implements ChatJudge {
  private readonly openai: OpenAI;
  private readonly limit: ConcurrencyLimit;

  constructor(private readonly options: JudgeClientOptions) {
    this.openai = new OpenAI({
      baseURL: options.baseUrl,
      // The client refuses to start without a key; an endpoint that needs none ignores this one.
      apiKey: options.apiKey ?? 'no-key',
      timeout: options.timeoutMs,
      maxRetries: 0,
    });
    this.limit = new ConcurrencyLimit(options.concurrency);
  }

  /** The endpoint's host (`judge.example.com:8443`), recorded with each outcome instead of the URL (which may carry secrets). */
  get endpointHost(): string {
    return new URL(this.options.baseUrl).host;
  }

  ask(prompt: string): Promise<JudgeAnswer> {
    return retry(() => this.limit.run(() => this.once(prompt)), {
      maxAttempts: 2,
      initialDelayMs: this.options.retryDelayMs ?? 500,
      retryIf: (e) => e instanceof JudgeFailure && e.retriable,
    });
  }

  private async once(prompt: string): Promise<JudgeAnswer> {
    const signal = AbortSignal.timeout(this.options.timeoutMs);
    let res: OpenAI.Chat.Completions.ChatCompletion;
    try {
      res = await this.openai.chat.completions.create(
        {
          model: this.options.model,
          messages: [{ role: 'user', content: prompt }],
          temperature: this.options.temperature,
          max_tokens: this.options.maxTokens,
        },
        { signal },
      );
    } catch (e) {
      throw toFailure(e, signal, this.options.timeoutMs);
    }
    const content = (res as { choices?: { message?: { content?: unknown } }[] }).choices?.[0]?.message?.content;
    if (typeof content !== 'string') throw new JudgeFailure('http', 'the answer has no choices[0].message.content string');
    return {
      content,
      model: typeof res.model === 'string' && res.model !== '' ? res.model : this.options.model,
      systemFingerprint: typeof res.system_fingerprint === 'string' && res.system_fingerprint !== '' ? res.system_fingerprint : undefined,
    };
  }
}

const RETRIED_STATUSES = new Set([429, 502, 503, 504]);

function toFailure(e: unknown, signal: AbortSignal, timeoutMs: number): JudgeFailure {
  if (e instanceof APIConnectionTimeoutError || (e instanceof APIUserAbortError && signal.aborted) || (signal.aborted && !(e instanceof APIError)))
    return new JudgeFailure('timeout', `no answer within ${timeoutMs} ms`, { cause: e });
  if (e instanceof APIConnectionError) return new JudgeFailure('unreachable', `connection failed: ${e.message}`, { retriable: true, cause: e });
  const status: unknown = e instanceof APIError ? e.status : undefined;
  if (typeof status === 'number') return new JudgeFailure('http', `HTTP ${status}`, { retriable: RETRIED_STATUSES.has(status), status, cause: e });
  // A body that is not JSON, or any other client-side surprise: the endpoint did not speak the protocol.
  // Only the error's name: its message may quote the answer, which stays out of logs.
  return new JudgeFailure('http', `unusable answer (${e instanceof Error ? e.name : typeof e})`, { cause: e });
}
