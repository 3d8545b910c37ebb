import { errorMessage, Logger } from '@srpo/core';
import type { AgentEvent, AgentEventsProducer, EmitResult } from '@srpo/events';
import { OpenAiError } from '../openai-protocol';
import { keyAllows, type ApiKeyIdentity, type ApiKeys } from './api-keys';
import { EpisodeOwners } from './episode-owners';
import type { KeyRateLimiter } from './key-rate-limiter';
import { clientGone, UpstreamClient } from './upstream-client';
import type { EventSpool } from './event-spool';
import {
  policyVersionOf,
  recordedOutputs,
  replyOf,
  StreamAccumulator,
  upstreamCompletionOf,
  type Retokenizer,
  type UpstreamCompletion,
} from './completion-record';
import { ConversationTurns } from './conversation-turns';
import { ChatChunkTranslator, chatCompletionOf, completionsBodyOf, tokenPromptOf, type TokenPromptPlan } from './token-prompt';
import type { HfTextCodec } from '../text-codec';
import { EPISODE_METADATA, episodeFieldsOf, SUBJECT_METADATA, type EpisodeFields } from './episode-fields';
import { clientChunk, clientView, sseData } from './upstream-relay';
import { EventRecorder } from './event-recorder';

type Json = Record<string, unknown>;

/** The upstream model serving a policy's current version, and that version. */
export interface ServedVersion {
  model: string;
  version: number;
}
export type Headers = Readonly<Record<string, string | string[] | undefined>>;

/** How the HTTP layer answers; `write` resolves once the client has taken the data (backpressure). */
export interface Responder {
  json(status: number, body: unknown, headers?: Record<string, string>): void;
  startStream(headers: Record<string, string>): void;
  write(data: string): Promise<void>;
  end(): void;
  /** Aborted when the client goes away before its answer ended: the upstream request is cancelled with it. */
  readonly gone?: AbortSignal;
}

export interface CompletionGatewayOptions {
  /** The upstream's OpenAI base URL, e.g. `http://127.0.0.1:8000/v1`. */
  upstreamUrl: string;
  upstreamApiKey?: string;
  /**
   * policy id (the `model` agents send) → the upstream's model name; unset: every model passes
   * under its own name. A Map because the ids come from requests: an object would answer
   * `constructor` or `__proto__` with what its prototype holds.
   */
  models?: ReadonlyMap<string, string>;
  /** Ask the upstream for `return_token_ids` (srpo serve, vLLM ≥ 0.10.2); off for upstreams that refuse unknown parameters. */
  upstreamTokenIds: boolean;
  /** Refuse a completion request without episode fields (else proxy it unrecorded). */
  strict: boolean;
  keys: ApiKeys;
  sdk: AgentEventsProducer;
  retokenizer?: Retokenizer;
  /** The version to record when the upstream reports none (SRPO_GATEWAY_VERSION). */
  versionFallback?: (policyId: string) => number | undefined;
  upstreamTimeoutMs: number;
  /** Completion requests in flight at once; more get 429. */
  maxInFlight: number;
  /** Longest wait for Kafka's acknowledgement before the events count as not written. */
  recordTimeoutMs: number;
  /** Where events go when Kafka cannot take them (SRPO_GATEWAY_SPOOL_DIR); unset: the request fails with 503. */
  spool?: EventSpool;
  /** Which key owns which episode (with keys only); unset: 100,000 episodes, forgotten after 1 h idle. */
  episodeOwners?: EpisodeOwners;
  /** Each key's request budget (with keys only); unset: none beyond `maxInFlight`. */
  rateLimiter?: KeyRateLimiter;
  /** The turns of multi-turn conversations; unset: the defaults of {@link ConversationTurns}. */
  conversationTurns?: ConversationTurns;
  /**
   * SRPO_GATEWAY_TOKEN_PROMPTS: a later turn goes upstream as `/v1/completions` with token ids (its
   * parent's as sampled) rendered with this codec (the served model's tokenizer and template).
   */
  tokenPrompts?: HfTextCodec;
  clock?: () => number;
}

/**
 * `srpo gateway`'s core, outside any HTTP framework: an OpenAI-compatible proxy that records
 * every completion choice as an AgentOutput. For each request it
 * 1. checks the API key against the policy (`model`), and the episode fields;
 * 2. asks the upstream for log-probs and token ids on top of what the agent asked;
 * 3. writes one AgentOutput per choice through the SDK (validated, idempotent producer,
 *    acknowledged by Kafka), and only then
 * 4. answers the agent: the upstream's response as the agent asked for it, plus the recorded
 *    output ids (`srpo.output_ids`, header `x-srpo-output-ids`) to name in its transition.
 *
 * If recording fails the agent gets an error, never an unrecorded completion. Upstream
 * errors pass through in OpenAI's shape.
 */
export class CompletionGateway {
  private readonly log = new Logger('gateway');
  private inFlight = 0;
  /** policy id → the upstream model that serves its current version, and that version (set by the publisher). */
  private readonly served = new Map<string, ServedVersion>();
  /**
   * `turnsLinked`: outputs recorded with a parent; `tokenDrift`: of those, whose context lost the
   * parent's sampled tokens; `tokenPrompts`: requests sent as token prompts.
   */
  readonly totals = { requests: 0, recorded: 0, refused: 0, turnsLinked: 0, tokenDrift: 0, malformedToolCalls: 0, tokenPrompts: 0 };

  /** Counters for /health, the spool's included. */
  stats(): Record<string, number> {
    return {
      ...this.totals,
      episodeOwners: this.episodes.size,
      conversations: this.turns.size,
      ...(this.o.spool
        ? {
            spoolPending: this.o.spool.pending,
            spoolBytes: this.o.spool.sizeBytes,
            spooled: this.o.spool.totals.spooled,
            replayed: this.o.spool.totals.replayed,
            spoolRejected: this.o.spool.totals.rejected,
          }
        : {}),
    };
  }

  private readonly upstream: UpstreamClient;
  private readonly recorder: EventRecorder;
  private readonly episodes: EpisodeOwners;
  private readonly turns: ConversationTurns;

  constructor(private readonly o: CompletionGatewayOptions) {
    this.upstream = new UpstreamClient(o, this.log);
    this.recorder = new EventRecorder(o.sdk, o.recordTimeoutMs, o.spool, this.log);
    this.episodes = o.episodeOwners ?? new EpisodeOwners({ maxEpisodes: 100_000, idleTtlMs: 3_600_000, clock: o.clock });
    this.turns = o.conversationTurns ?? new ConversationTurns();
  }

  async complete(endpoint: 'chat' | 'completions', headers: Headers, body: unknown, out: Responder): Promise<void> {
    this.totals.requests++;
    try {
      // The key's own budget first, then the gateway's ceiling shared by all.
      this.admit(headers);
      if (this.inFlight >= this.o.maxInFlight)
        throw new OpenAiError(
          429,
          `the gateway has ${this.o.maxInFlight} requests in flight; retry later`,
          null,
          'rate_limit_exceeded',
          'rate_limit_error',
        ).withHeaders({ 'retry-after': '1' });
    } catch (e) {
      this.totals.refused++;
      throw e;
    }
    this.inFlight++;
    try {
      await this.completeOne(endpoint, headers, body, out);
    } catch (e) {
      this.totals.refused++;
      throw e;
    } finally {
      this.inFlight--;
    }
  }

  /** `GET /v1/models`, narrowed to the models the caller's key may use (as serve's): a key learns nothing of the others. */
  async models(headers: Headers): Promise<Json> {
    const key = this.o.keys.authorize(header(headers, 'authorization'), undefined);
    if (this.o.models) {
      const ids = [...new Set([...this.o.models.keys(), ...this.served.keys()])].filter((id) => keyAllows(key, id));
      return { object: 'list', data: ids.map((id) => ({ id, object: 'model', created: 0, owned_by: 'srpo' })) };
    }
    const res = await this.upstream.get('models');
    if (!res.ok) throw new OpenAiError(502, `the upstream's /models answered ${res.status}`, null, 'upstream_error', 'upstream_error');
    const list = (await res.json()) as Json;
    // Every model passes under its own name here: the upstream's names are the policy ids.
    if (Array.isArray(list.data)) list.data = (list.data as Json[]).filter((m) => typeof m.id === 'string' && keyAllows(key, m.id));
    return list;
  }

  /**
   * `POST /v1/srpo/served-models` `{policy_id, model, version}`: from now on a request for
   * `policy_id` goes upstream as `model` (e.g. `actor@v12`, the adapter the publisher loaded),
   * and its outputs are recorded with `version` unless the upstream reports one itself. An
   * admin key (`["*"]`) is required when keys are configured. A request already sent upstream
   * keeps the model and version it was sent with.
   */
  setServed(headers: Headers, body: unknown): Json {
    this.o.keys.authorizeAdmin(header(headers, 'authorization'));
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new OpenAiError(400, 'the body must be a JSON object {policy_id, model, version}', null, 'invalid_value');
    const b = body as Json;
    if (typeof b.policy_id !== 'string' || b.policy_id === '')
      throw new OpenAiError(400, 'policy_id: must be a non-empty string', 'policy_id', 'invalid_value');
    if (typeof b.model !== 'string' || b.model === '') throw new OpenAiError(400, 'model: must be a non-empty string', 'model', 'invalid_value');
    if (typeof b.version !== 'number' || !Number.isSafeInteger(b.version) || b.version < 0)
      throw new OpenAiError(400, 'version: must be a non-negative integer', 'version', 'invalid_value');
    const prev = this.served.get(b.policy_id);
    this.served.set(b.policy_id, { model: b.model, version: b.version });
    this.log.info('served version set', { policyId: b.policy_id, model: b.model, version: b.version, previous: prev?.version });
    return this.servedModels(headers);
  }

  /** `GET /v1/srpo/served-models`: what {@link setServed} set, per policy. */
  servedModels(headers: Headers): Json {
    this.o.keys.authorize(header(headers, 'authorization'), undefined);
    return { data: [...this.served].map(([policy_id, v]) => ({ policy_id, model: v.model, version: v.version })) };
  }

  /** `POST /v1/srpo/transitions` and `/v1/srpo/outcomes`: validated exactly as the SDK does. */
  async record(kind: 'Transition' | 'EpisodeOutcome', headers: Headers, body: unknown): Promise<Json> {
    const key = this.admit(headers);
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new OpenAiError(400, `the body must be a JSON ${kind} object`, null, 'invalid_value');
    const episodeId = (body as Json).episodeId;
    // A body without a string episodeId is refused by the validation below, naming the field.
    if (key && typeof episodeId === 'string') this.claimEpisode(episodeId, key.id, 'episodeId');
    const event = { type: kind, value: body } as AgentEvent;
    const written = await this.recorder.emit([event]);
    return written === 'spooled' ? { recorded: kind, spooled: true } : { recorded: kind, ...coordinates(written) };
  }

  private async completeOne(endpoint: 'chat' | 'completions', headers: Headers, raw: unknown, out: Responder): Promise<void> {
    const startedAtMs = this.now();
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
      throw new OpenAiError(400, 'the request body must be a JSON object', null, 'invalid_value');
    const body = raw as Json;
    const policyId = body.model;
    if (typeof policyId !== 'string' || policyId === '') throw new OpenAiError(400, 'model: you must provide a model parameter', 'model', 'invalid_value');
    const key = this.o.keys.authorize(header(headers, 'authorization'), policyId);
    const routed = this.served.get(policyId);
    const upstreamModel = routed?.model ?? (this.o.models ? this.o.models.get(policyId) : policyId);
    if (upstreamModel === undefined)
      throw new OpenAiError(
        404,
        `The model '${policyId}' does not exist; the gateway serves ${[...(this.o.models?.keys() ?? [])].join(', ')}`,
        'model',
        'model_not_found',
      );
    const metadata = stringRecord(body.metadata);
    const fields = episodeFieldsOf(headers, metadata, this.o.strict);
    if (fields && key) this.claimEpisode(fields.episodeId, key.id, 'X-SRPO-Episode');
    const temperature = body.temperature == null ? 1 : Number(body.temperature);
    if (fields && !(temperature > 0)) {
      throw new OpenAiError(
        400,
        'temperature: 0 (greedy) cannot be recorded for training: there is no sampling distribution; use a temperature > 0',
        'temperature',
        'invalid_value',
      );
    }
    const stream = body.stream === true;
    const plan = this.tokenPlan(endpoint, fields, body);
    const upstreamBody = plan
      ? completionsBodyOf(body, plan.ids, upstreamModel, this.o.upstreamTokenIds)
      : this.upstreamBody(endpoint, body, upstreamModel, fields !== undefined);
    const res = await this.upstream.post(plan ? 'completions' : endpoint, upstreamBody, header(headers, 'authorization'), out.gone);
    const versionHeader = res.headers.get('x-srpo-policy-version') ?? undefined;
    if (!stream) {
      const answer = (await res.json().catch(() => {
        if (out.gone?.aborted) throw clientGone();
        throw new OpenAiError(502, 'the upstream answered with a body that is not JSON', null, 'upstream_invalid', 'upstream_error');
      })) as Json;
      const json = plan ? chatCompletionOf(answer, plan) : answer;
      if (!fields) return out.json(200, json, passHeaders(versionHeader));
      const up = withPromptIds(upstreamCompletionOf(json), plan);
      const recorded = await this.recordCompletion(up, policyId, versionHeader, fields, body, temperature, startedAtMs, routed);
      const reply = clientView(endpoint, body, json);
      reply.srpo = { output_ids: recorded.outputIds, policy_id: policyId, policy_version: recorded.version, ...(recorded.spooled ? { spooled: true } : {}) };
      return out.json(200, reply, { ...passHeaders(versionHeader), 'x-srpo-output-ids': recorded.outputIds.join(',') });
    }
    await this.relayStream(endpoint, body, res, out, versionHeader, fields && { fields, policyId, temperature, startedAtMs, routed }, plan);
  }

  /**
   * The token prompt for a chat request that continues a remembered turn, when token prompts
   * are on and the request qualifies (see {@link tokenPromptOf}); else undefined (sent as text).
   */
  private tokenPlan(endpoint: 'chat' | 'completions', fields: EpisodeFields | undefined, body: Json): TokenPromptPlan | undefined {
    if (!this.o.tokenPrompts || endpoint !== 'chat' || !fields) return undefined;
    const parent = this.turns.parent(fields, body.messages, fields.parentOutputId);
    const plan = parent && tokenPromptOf(this.o.tokenPrompts, body, parent);
    if (plan) this.totals.tokenPrompts++;
    return plan;
  }

  /** What the upstream is asked: the agent's request plus log-probs and token ids when recording. */
  private upstreamBody(endpoint: 'chat' | 'completions', body: Json, model: string, recording: boolean): Json {
    const up: Json = { ...body, model };
    const meta = stringRecord(body.metadata);
    for (const k of [...Object.values(EPISODE_METADATA), SUBJECT_METADATA]) delete meta[k];
    if (Object.keys(meta).length > 0) up.metadata = meta;
    else delete up.metadata;
    if (!recording) return up;
    if (endpoint === 'chat') up.logprobs = true;
    else if (body.logprobs == null) up.logprobs = 0;
    if (this.o.upstreamTokenIds) up.return_token_ids = true;
    return up;
  }

  private async recordCompletion(
    up: UpstreamCompletion,
    policyId: string,
    versionHeader: string | undefined,
    fields: EpisodeFields,
    body: Json,
    temperature: number,
    startedAtMs: number,
    routed: ServedVersion | undefined,
  ): Promise<{ outputIds: string[]; version: number; spooled: boolean }> {
    // The upstream's own report wins; else the version of the model the request was sent as; else the fixed one.
    const fallback = routed ? () => routed.version : this.o.versionFallback;
    const version = policyVersionOf(policyId, versionHeader, up.systemFingerprint, fallback);
    const maxTokens = [body.max_completion_tokens, body.max_tokens].find((v) => Number.isInteger(v)) as number | undefined;
    // Numbered after the upstream answered (nothing awaits between here and the emit's start), so concurrent turns get distinct numbers.
    const place = this.turns.place(fields, body.messages, fields);
    const outputs = recordedOutputs(up, {
      fields,
      place,
      policyId,
      policyVersion: version,
      requestBody: body,
      temperature,
      maxTokens,
      seed: Number.isInteger(body.seed) ? (body.seed as number) : undefined,
      startedAtMs,
      finishedAtMs: Math.max(this.now(), startedAtMs),
      retokenizer: this.o.retokenizer,
    });
    const written = await this.recorder.emit(outputs.map((value) => ({ type: 'AgentOutput', value })));
    this.totals.recorded += outputs.length;
    outputs.forEach((o, i) => {
      if (o.parentOutputId) this.totals.turnsLinked++;
      if (o.tokenDrift) this.totals.tokenDrift++;
      if (o.malformedToolCall) this.totals.malformedToolCalls++;
      this.turns.remember(fields, body.messages, replyOf(up.choices[i]), o as { outputId: string; contextTokenIds: number[]; responseTokenIds: number[] });
    });
    if (outputs.some((o) => o.tokenDrift))
      this.log.debug('token drift: a turn re-tokenized its parent differently from what was sampled', {
        episodeId: fields.episodeId,
        outputId: outputs[0].outputId,
        parentOutputId: outputs[0].parentOutputId,
      });
    return { outputIds: outputs.map((o) => o.outputId), version, spooled: written === 'spooled' };
  }

  private async relayStream(
    endpoint: 'chat' | 'completions',
    body: Json,
    res: Response,
    out: Responder,
    versionHeader: string | undefined,
    rec: { fields: EpisodeFields; policyId: string; temperature: number; startedAtMs: number; routed: ServedVersion | undefined } | undefined,
    plan?: TokenPromptPlan,
  ): Promise<void> {
    const acc = new StreamAccumulator();
    const translator = plan && new ChatChunkTranslator(plan);
    out.startStream(passHeaders(versionHeader));
    let last: Json | undefined;
    try {
      for await (const data of sseData(res)) {
        if (data === '[DONE]') break;
        const raw = JSON.parse(data) as Json;
        const chunk = translator && !raw.error ? translator.translate(raw) : raw;
        // eslint-disable-next-line @typescript-eslint/no-base-to-string -- a field of the upstream JSON, a string when present
        if (chunk.error) throw new OpenAiError(502, String((chunk.error as Json).message ?? 'upstream stream error'), null, 'upstream_error', 'upstream_error');
        acc.add(chunk);
        last = chunk;
        const view = clientChunk(endpoint, body, chunk);
        if (view) await out.write(`data: ${JSON.stringify(view)}\n\n`);
      }
      if (rec) {
        const up = withPromptIds(acc.result(), plan);
        const recorded = await this.recordCompletion(up, rec.policyId, versionHeader, rec.fields, body, rec.temperature, rec.startedAtMs, rec.routed);
        const srpo = {
          output_ids: recorded.outputIds,
          policy_id: rec.policyId,
          policy_version: recorded.version,
          ...(recorded.spooled ? { spooled: true } : {}),
        };
        const tail = { id: last?.id, object: last?.object, created: last?.created, model: last?.model, choices: [], srpo };
        await out.write(`data: ${JSON.stringify(tail)}\n\n`);
      }
      await out.write('data: [DONE]\n\n');
    } catch (e) {
      // The client left: the upstream read was cancelled with it, and nothing is recorded (it never got the output ids).
      if (out.gone?.aborted) throw clientGone();
      // Headers are gone: the failure is an error event, and no [DONE] follows.
      const err =
        e instanceof OpenAiError ? e : new OpenAiError(502, `the upstream stream failed (${errorMessage(e)})`, null, 'upstream_error', 'upstream_error');
      await out.write(`data: ${JSON.stringify(err.body())}\n\n`).catch(() => undefined);
    } finally {
      out.end();
    }
  }

  private now(): number {
    return (this.o.clock ?? Date.now)();
  }

  /** The caller's key (undefined without keys), charged one request of its budget. */
  private admit(headers: Headers): ApiKeyIdentity | undefined {
    const key = this.o.keys.authorize(header(headers, 'authorization'), undefined);
    if (key) this.o.rateLimiter?.take(key.id);
    return key;
  }

  private claimEpisode(episodeId: string, keyId: string, param: string): void {
    try {
      this.episodes.claim(episodeId, keyId, param);
    } catch (e) {
      if (e instanceof OpenAiError && e.status === 403) this.log.warn('refused: the episode belongs to another key', { keyId, episodeId });
      throw e;
    }
  }
}

/** A token prompt's ids are the recorded context where the upstream does not send them back. */
function withPromptIds(up: UpstreamCompletion, plan: TokenPromptPlan | undefined): UpstreamCompletion {
  return plan && !up.promptTokenIds ? { ...up, promptTokenIds: plan.ids } : up;
}

function passHeaders(versionHeader: string | undefined): Record<string, string> {
  return versionHeader ? { 'x-srpo-policy-version': versionHeader } : {};
}

function header(headers: Headers, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function stringRecord(v: unknown): Record<string, string> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return {};
  return Object.fromEntries(Object.entries(v as Json).filter(([, x]) => typeof x === 'string')) as Record<string, string>;
}

function coordinates(written: EmitResult): Json {
  const r = written[0];
  return r ? { topic: r.topicName, partition: r.partition, offset: r.baseOffset ?? null } : {};
}
