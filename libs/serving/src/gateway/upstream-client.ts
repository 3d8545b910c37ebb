import { errorMessage, type Logger } from '@srpo/core';
import { OpenAiError } from '../openai-protocol';
import type { ApiKeys } from './api-keys';
import { fetchFailureReason, redactCredentials, upstreamTarget, type UpstreamTarget } from './upstream-url';

type Json = Record<string, unknown>;

export interface UpstreamClientOptions {
  upstreamUrl: string;
  upstreamApiKey?: string;
  keys: ApiKeys;
  upstreamTimeoutMs: number;
}

/**
 * The gateway's requests to its upstream: which credentials go with them, the timeout, the
 * client's cancellation, and upstream failures as OpenAI errors that name neither the upstream's
 * URL nor its credentials.
 */
export class UpstreamClient {
  private readonly target: UpstreamTarget;

  constructor(
    private readonly o: UpstreamClientOptions,
    private readonly log: Logger,
  ) {
    this.target = upstreamTarget(o.upstreamUrl);
  }

  /** `GET <base>/<path>` with the upstream's credentials and the timeout; unreachable is a 502. */
  async get(path: string): Promise<Response> {
    try {
      const auth = this.auth(undefined);
      return await fetch(`${this.target.base}/${path}`, {
        headers: auth ? { authorization: auth } : {},
        signal: AbortSignal.timeout(this.o.upstreamTimeoutMs),
      });
    } catch (e) {
      throw this.unreachable(e);
    }
  }

  /**
   * Sends the request upstream. Its signal is the timeout's and the client's: when the client goes
   * away, the upstream request (a generation, and a streamed body's reading) is cancelled too, so
   * the upstream frees what it holds for it instead of generating for nobody.
   */
  async post(endpoint: 'chat' | 'completions', body: Json, clientAuth: string | undefined, gone?: AbortSignal): Promise<Response> {
    const url = `${this.target.base}/${endpoint === 'chat' ? 'chat/completions' : 'completions'}`;
    const auth = this.auth(clientAuth);
    const timeout = AbortSignal.timeout(this.o.upstreamTimeoutMs);
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(auth ? { authorization: auth } : {}) },
        body: JSON.stringify(body),
        signal: gone ? AbortSignal.any([timeout, gone]) : timeout,
      });
    } catch (e) {
      if (gone?.aborted) throw clientGone();
      throw this.unreachable(e);
    }
    if (!res.ok) {
      const text = await res.text();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      const err = (parsed as { error?: Json } | undefined)?.error;
      // Upstream refusals pass through with their status and OpenAI-shaped body.
      throw new OpenAiError(
        res.status,
        typeof err?.message === 'string' ? err.message : `the upstream answered ${res.status}: ${text.slice(0, 200)}`,
        typeof err?.param === 'string' ? err.param : null,
        typeof err?.code === 'string' ? err.code : null,
        typeof err?.type === 'string' ? err.type : 'upstream_error',
      );
    }
    return res;
  }

  /** The upstream's key, else the URL's credentials, else (with no keys of the gateway's own) the agent's. */
  private auth(clientAuth: string | undefined): string | undefined {
    if (this.o.upstreamApiKey) return `Bearer ${this.o.upstreamApiKey}`;
    return this.target.basicAuth ?? (this.o.keys.enabled ? undefined : clientAuth);
  }

  /** A 502 that names neither the upstream's URL nor its credentials; the log gets the URL without them. */
  private unreachable(e: unknown): OpenAiError {
    this.log.warn('the upstream could not be reached', { upstream: this.target.base, error: redactCredentials(errorMessage(e)) });
    return new OpenAiError(502, `the upstream could not be reached (${fetchFailureReason(e)})`, null, 'upstream_unreachable', 'upstream_error');
  }
}

/** The request ended because its client went away (nginx's 499): there is no one to answer. */
export function clientGone(): OpenAiError {
  return new OpenAiError(499, 'the client closed the request; the upstream request was cancelled', null, 'client_closed_request');
}
