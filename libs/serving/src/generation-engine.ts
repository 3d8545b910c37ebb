import { randomInt } from 'crypto';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { SeededRng, type CausalLm } from '@srpo/policy';
import { isLlamaModel, LlamaDecodeBatch, prefillMany, type DecodeProducts, type LlamaModel } from '@srpo/hf';

/** How one choice is sampled. */
export interface GenerationParams {
  /** Most tokens to generate (≥ 1). */
  maxTokens: number;
  /** Softmax temperature; 0 is greedy (argmax, log-probs then at temperature 1). */
  temperature: number;
  /** Nucleus sampling: draw among the most likely tokens whose mass reaches `topP` (0 < topP ≤ 1). */
  topP: number;
  /** Seeds this choice's draws; unset: a fresh random seed. */
  seed?: number;
  /** Ids that end the choice with `finish_reason: "stop"` (the end token is kept as its last token). */
  stopIds: readonly number[];
  /** How many of the most likely alternatives to report with each token (0..20). */
  topLogprobs: number;
}

/** One sampled token. */
export interface TokenDraw {
  id: number;
  /**
   * `log softmax(logits / τ)[id]` over the whole vocabulary at the sampling temperature τ
   * (τ = 1 when greedy), before any top-p cut: the behaviour log-prob that the learner's
   * `tokenLogProbs(…, { temperature: τ })` recomputes. Top-p is part of the environment, as
   * top-k is for the agents' sampler.
   */
  logprob: number;
  /** The `topLogprobs` most likely tokens at this position, most likely first (ties: lower id). */
  top: { id: number; logprob: number }[];
}

export type FinishReason = 'stop' | 'length';

/** Receives a choice's tokens as they are sampled; returning true ends the choice (a stop string matched). */
export type TokenSink = (draw: TokenDraw) => boolean;

/**
 * How {@link GenerationEngine.generate} rejects a choice whose signal aborted (its client went
 * away). CONFLICT: the request no longer has anyone to answer, so it is not carried on; nothing
 * is retried and nothing needs answering.
 */
export class GenerationCancelled extends SrpoError {
  constructor() {
    super(ErrorCode.CONFLICT, 'generation cancelled: the client went away');
  }
}

interface Row {
  model: CausalLm;
  seq: number[];
  generated: number;
  params: GenerationParams;
  rng: SeededRng;
  stops: Set<number>;
  sink: TokenSink;
  resolve: (reason: FinishReason) => void;
  reject: (e: unknown) => void;
  done: boolean;
  /** Whether the row decodes with a KV cache (a Llama-family model, with a non-zero budget). */
  cached: boolean;
  /** Order of arrival: preemption takes the latest first, and puts them back in this order. */
  arrival: number;
  /** Stops listening to the choice's abort signal once the row has finished. */
  unlisten?: () => void;
}

/** A model's rows decoding with a KV cache: the batch's cache and its rows, in the batch's row order. */
interface CachedBatch {
  batch: LlamaDecodeBatch;
  rows: Row[];
}

/** Default of {@link GenerationEngineOptions.kvCacheTokens}: 32,768 slots (1.5 GB for SmolLM2-135M at 46 KB per slot). */
export const DEFAULT_KV_CACHE_TOKENS = 32_768;

export interface GenerationEngineOptions {
  /** Rows (choices) forwarded together in one step, across requests. */
  maxBatchRows: number;
  /** Rows waiting beyond the batch before {@link GenerationEngine.generate} refuses with OVERLOADED. */
  maxQueuedRows: number;
  /**
   * Token slots the KV caches of all rows may hold together (default {@link DEFAULT_KV_CACHE_TOKENS}).
   * A model's rows are padded to its longest, so they hold rows × the longest row's length (prompt
   * + tokens generated so far). A waiting row joins when the next step fits with it; when the next
   * step of the rows in the batch would not fit, the latest arrived rows are preempted: they leave
   * the cache and wait at the front of the queue, keeping their tokens and sampler state, and are
   * prefilled again (prompt + tokens generated) when room returns, so their output is the same.
   * A choice that could never fit (its prompt + max tokens over the budget) is refused. 0 turns the
   * cache off: every step recomputes every row's whole sequence.
   */
  kvCacheTokens?: number;
  /** The product kernels of cached decode steps (@srpo/hf's `DecodeProducts`); default `learner`: served log-probs are the learner's recompute's bit for bit, at the same speed (bench/serving). */
  decodeProducts?: DecodeProducts;
}

/**
 * Continuous batching over a causal LM: every choice of every request in flight is a row;
 * each step forwards all active rows of one model at once and samples one token per row.
 * A new request joins at the next step, a finished row leaves at once, so a long
 * completion never holds a short one back. Rows keep the model they started with: a new
 * policy version serves the requests that arrive after it, and no request is cut over
 * from one version to another mid-way.
 *
 * Hugging Face Llama-family models decode with a KV cache (@srpo/hf's llama-decode): a
 * choice's prompt is run once when it joins (the n choices of one request, which arrive
 * together, share that prefill), then each step runs one position per row against the cached
 * keys and values. The caches of all models together stay within a token budget: rows join
 * when the next step fits, and when the rows' growth would pass it the latest arrived rows are
 * preempted and later prefilled again with what they had generated (see {@link preempt}).
 * The project's own transformer has no cache: each step recomputes every
 * row's whole sequence (cost grows with the square of the length), which fits its small size.
 *
 * The engine yields to the event loop between steps, so requests that arrive mid-generation
 * join at the next step, and timers, heartbeats and health checks run while it generates.
 */
export class GenerationEngine {
  private readonly queue: Row[] = [];
  private active: Row[] = [];
  private loop?: Promise<void>;
  private readonly cached = new Map<CausalLm, CachedBatch>();
  private readonly kvCacheTokens: number;
  private arrivals = 0;
  /**
   * Rows (choices) generated since start, forward steps taken, tokens generated, prompts
   * prefilled into a KV cache, rows preempted to stay within the KV-cache budget, and the
   * generated tokens their prefills ran again, and rows cancelled before they finished (their client went away).
   */
  readonly totals = { rows: 0, steps: 0, tokens: 0, prefills: 0, preemptions: 0, recomputedTokens: 0, cancelled: 0 };

  constructor(private readonly options: GenerationEngineOptions) {
    this.kvCacheTokens = options.kvCacheTokens ?? DEFAULT_KV_CACHE_TOKENS;
    if (!(Number.isInteger(this.kvCacheTokens) && this.kvCacheTokens >= 0))
      throw new ValidationError('kvCacheTokens', `must be an integer >= 0, got ${options.kvCacheTokens}`);
  }

  /** Rows generating or waiting, per model (a retired model is disposed once it has none). */
  inFlight(model: CausalLm): number {
    return this.active.filter((r) => r.model === model).length + this.queue.filter((r) => r.model === model).length;
  }

  /**
   * The longest sequence (prompt + tokens generated) one choice of `model` may reach: its context,
   * or the KV-cache budget where that is smaller (a longer choice is refused by {@link generate}).
   */
  longestSequence(model: CausalLm): number {
    return this.usesCache(model) ? Math.min(model.config.maxSeqLen, this.kvCacheTokens) : model.config.maxSeqLen;
  }

  /**
   * Generates one choice; resolves with its finish reason once done. When `signal` aborts first,
   * the choice stops at once: it leaves the queue, or leaves the batch and frees its KV-cache
   * slots before the next step, and the promise rejects with {@link GenerationCancelled}.
   */
  generate(model: CausalLm, prompt: readonly number[], params: GenerationParams, sink: TokenSink, signal?: AbortSignal): Promise<FinishReason> {
    checkParams(model, prompt, params);
    if (signal?.aborted) return Promise.reject(new GenerationCancelled());
    const cached = this.usesCache(model);
    // Alone in the batch a row holds at most its prompt + max tokens slots: one that could not fit even then never will.
    const most = Math.min(prompt.length + params.maxTokens, model.config.maxSeqLen);
    if (cached && most > this.kvCacheTokens) {
      throw new ValidationError(
        'max_tokens',
        `the choice needs ${most} KV-cache slots (${prompt.length} in the prompt, ${params.maxTokens} to generate), over the server's budget of ${this.kvCacheTokens}`,
      );
    }
    if (this.queue.length >= this.options.maxQueuedRows) {
      return Promise.reject(
        new SrpoError(ErrorCode.UNAVAILABLE, `the server is at capacity (${this.options.maxQueuedRows} choices waiting); retry later`, { retriable: true }),
      );
    }
    return new Promise<FinishReason>((resolve, reject) => {
      const onAbort = (): void => this.cancel(row);
      const row: Row = {
        model,
        seq: [...prompt],
        generated: 0,
        params,
        rng: new SeededRng(params.seed ?? randomInt(0, 2 ** 31 - 1)),
        stops: new Set(params.stopIds),
        sink,
        resolve,
        reject,
        done: false,
        cached,
        arrival: this.arrivals++,
        ...(signal ? { unlisten: () => signal.removeEventListener('abort', onAbort) } : {}),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.queue.push(row);
      this.totals.rows++;
      this.loop ??= this.run().finally(() => (this.loop = undefined));
    });
  }

  /**
   * Ends a choice whose client went away. A waiting row leaves the queue now; a row in the batch
   * is marked done, which a step under way skips, and {@link leaveDone} takes it out of the batch
   * and its KV cache before the next step.
   */
  private cancel(r: Row): void {
    if (r.done) return;
    this.totals.cancelled++;
    const waiting = this.queue.indexOf(r);
    if (waiting >= 0) this.queue.splice(waiting, 1);
    finish(r, undefined, new GenerationCancelled());
  }

  /** Takes rows that ended between steps (cancelled) out of the batch and their models' KV caches. */
  private leaveDone(): void {
    if (!this.active.some((r) => r.done)) return;
    this.active = this.active.filter((r) => !r.done);
    for (const [model, state] of this.cached) {
      const idx = state.rows.flatMap((r, i) => (r.done ? [i] : []));
      if (idx.length === 0) continue;
      state.batch.remove(idx);
      state.rows = state.rows.filter((r) => !r.done);
      if (state.rows.length === 0) this.dropCache(model);
    }
  }

  /** Resolves once no row is left. */
  async drain(): Promise<void> {
    while (this.loop) await this.loop;
  }

  private async run(): Promise<void> {
    // Start on the next turn of the event loop, so that requests that arrived together step together.
    await yieldToEventLoop();
    while (this.active.length > 0 || this.queue.length > 0) {
      this.leaveDone();
      this.preempt();
      this.admit();
      const byModel = new Map<CausalLm, Row[]>();
      for (const r of this.active) byModel.set(r.model, [...(byModel.get(r.model) ?? []), r]);
      for (const [model, rows] of byModel) {
        try {
          if (isLlamaModel(model) && this.usesCache(model)) await this.stepCached(model, rows);
          else await this.step(model, rows);
        } catch (e) {
          for (const r of rows) finish(r, undefined, e);
          this.dropCache(model);
        }
      }
      this.active = this.active.filter((r) => !r.done);
      // tfjs-node's data() resolves as a microtask: without this turn no I/O would run until the queue empties.
      await yieldToEventLoop();
    }
  }

  private usesCache(model: CausalLm): boolean {
    return this.kvCacheTokens > 0 && isLlamaModel(model);
  }

  /** Token slots the KV caches hold now (every model's batch: rows × its widest row). */
  get kvSlots(): number {
    let slots = 0;
    for (const { batch } of this.cached.values()) slots += batch.slots;
    return slots;
  }

  /**
   * Moves waiting rows into the batch, first come first served, while the batch has room and the
   * next step fits the KV-cache budget with them (see {@link nextStepSlots}). A row that does not
   * fit waits, with the rows behind it, until rows finish; one that fits nothing was refused by
   * {@link generate}; one alone always fits.
   */
  private admit(): void {
    while (this.active.length < this.options.maxBatchRows && this.queue.length > 0) {
      const next = this.queue[0];
      if (next.cached && this.active.length > 0 && nextStepSlots([...this.active, next]) > this.kvCacheTokens) break;
      this.active.push(this.queue.shift() as Row);
    }
  }

  /**
   * Recompute preemption (vLLM's): while the next step of the active rows would exceed the
   * KV-cache budget, the latest arrived cached row leaves its batch and goes back to the front of
   * the queue, in order of arrival. It keeps its sequence (prompt + tokens generated), sampler
   * state and sink, so once {@link admit} takes it again its prefill of the whole sequence gives
   * the logits its next step would have (up to float32 summation order) and it goes on where it
   * stopped. The earliest rows go on generating, so every row finishes.
   */
  private preempt(): void {
    let slots = nextStepSlots(this.active);
    if (slots <= this.kvCacheTokens) return;
    const latestFirst = this.active.filter((r) => r.cached).sort((a, b) => b.arrival - a.arrival);
    const out: Row[] = [];
    const leaving = new Set<Row>();
    // One row alone always fits (generate refused any other), so at least one stays.
    for (const r of latestFirst) {
      if (slots <= this.kvCacheTokens || out.length === latestFirst.length - 1) break;
      out.push(r);
      leaving.add(r);
      slots = nextStepSlots(this.active.filter((a) => !leaving.has(a)));
    }
    this.active = this.active.filter((r) => !leaving.has(r));
    for (const [model, state] of this.cached) {
      const idx = state.rows.flatMap((r, i) => (leaving.has(r) ? [i] : []));
      if (idx.length === 0) continue;
      state.batch.remove(idx);
      state.rows = state.rows.filter((r) => !leaving.has(r));
      if (state.rows.length === 0) this.dropCache(model);
    }
    this.queue.unshift(...out.sort((a, b) => a.arrival - b.arrival));
    this.totals.preemptions += out.length;
    this.totals.recomputedTokens += out.reduce((n, r) => n + r.generated, 0);
  }

  /**
   * One cached step for a Llama-family model's rows: one position for each row already in its
   * batch, and a prefill for each new prompt (rows with the same prompt, a request's n choices,
   * share one and join as copies); then one token for each row, and finished rows leave.
   */
  private async stepCached(model: LlamaModel, rows: Row[]): Promise<void> {
    let state = this.cached.get(model);
    if (!state) {
      state = { batch: new LlamaDecodeBatch(model, { tokenBudget: this.kvCacheTokens, products: this.options.decodeProducts ?? 'learner' }), rows: [] };
      this.cached.set(model, state);
    }
    const inBatch = new Set(state.rows);
    const joining = new Map<string, Row[]>();
    for (const r of rows) {
      if (inBatch.has(r) || r.done) continue;
      const key = r.seq.join(',');
      joining.set(key, [...(joining.get(key) ?? []), r]);
    }
    const order: Row[] = [];
    const parts: tf.Tensor2D[] = [];
    try {
      if (state.rows.length > 0) {
        parts.push(state.batch.step(state.rows.map((r) => r.seq[r.seq.length - 1])));
        order.push(...state.rows);
      }
      if (joining.size > 0) {
        // One forward for every new prompt; each joins as one row per choice.
        const groups = [...joining.values()];
        const { caches, logits } = prefillMany(
          model,
          groups.map((g) => g[0].seq),
        );
        this.totals.prefills += groups.length;
        try {
          state.batch.addMany(caches.map((cache, g) => ({ cache, copies: groups[g].length })));
        } catch (e) {
          logits.dispose();
          throw e;
        } finally {
          for (const cache of caches) cache.dispose();
        }
        for (const group of groups) state.rows.push(...group);
        const rowOf = groups.flatMap((g, i) => g.map(() => i));
        parts.push(rowOf.length === groups.length ? logits : tf.tidy(() => tf.gather(logits, tf.tensor1d(rowOf, 'int32'))));
        if (rowOf.length !== groups.length) logits.dispose();
        order.push(...groups.flat());
      }
      const all = parts.length === 1 ? parts[0] : tf.concat(parts, 0);
      await this.sample(model, order, all);
    } finally {
      tf.dispose(parts);
    }
    const leaving = state.rows.flatMap((r, i) => (r.done ? [i] : []));
    state.batch.remove(leaving);
    state.rows = state.rows.filter((r) => !r.done);
    if (state.rows.length === 0) this.dropCache(model);
  }

  private dropCache(model: CausalLm): void {
    this.cached.get(model)?.batch.dispose();
    this.cached.delete(model);
  }

  /** One forward pass over `rows`' whole sequences (no cache) and one token for each. */
  private async step(model: CausalLm, rows: Row[]): Promise<void> {
    const width = Math.max(...rows.map((r) => r.seq.length));
    const ids = new Int32Array(rows.length * width);
    const last = new Int32Array(rows.length);
    rows.forEach((r, i) => {
      ids.set(r.seq, i * width);
      last[i] = i * width + r.seq.length - 1;
    });
    // Right-padding is harmless: attention is causal, and only each row's last real position is read
    // (and projected to the vocabulary).
    const logits = tf.tidy(() => model.logits2d(tf.tensor2d(ids, [rows.length, width], 'int32'), 1, tf.tensor1d(last, 'int32')));
    try {
      await this.sample(model, rows, logits);
    } finally {
      logits.dispose();
    }
  }

  /**
   * One token for each row from its next-token logits (row i of `logits` `[R, V]`, not disposed here).
   * When every row is greedy with no alternatives to report, only each row's argmax and its
   * log-prob leave TensorFlow (ArgMax, ties to the lower id as {@link argmax}, and Max of the same
   * log-softmax, whose value at the argmax is the max): two numbers per row instead of the
   * vocabulary (SmolLM2: 49,152 floats copied and scanned in JavaScript per row and step).
   */
  private async sample(model: CausalLm, rows: Row[], logits: tf.Tensor2D): Promise<void> {
    const { vocabSize } = model.config;
    const taus = Float32Array.from(rows, (r) => (r.params.temperature > 0 ? r.params.temperature : 1));
    const greedyOnly = rows.every((r) => r.params.temperature === 0 && r.params.topLogprobs === 0);
    const out = tf.tidy(() => {
      // x / 1 is x: no division where every row samples at temperature 1 (greedy rows included).
      const scaled = taus.every((t) => t === 1) ? logits : tf.div(logits, tf.tensor2d(taus, [rows.length, 1]));
      const lp = tf.logSoftmax(scaled) as tf.Tensor2D;
      return greedyOnly ? [tf.argMax(lp, 1), tf.max(lp, 1)] : [lp];
    });
    let values: Float32Array;
    let best: Int32Array | undefined;
    try {
      if (greedyOnly) [best, values] = (await Promise.all([out[0].data(), out[1].data()])) as [Int32Array, Float32Array];
      else values = (await out[0].data()) as Float32Array;
    } finally {
      tf.dispose(out);
    }
    this.totals.steps++;
    rows.forEach((r, i) => {
      if (r.done) return;
      if (best) return this.take(model, r, best[i], values[i], []);
      const row = values.subarray(i * vocabSize, (i + 1) * vocabSize);
      const id = r.params.temperature > 0 ? drawTopP(row, r.params.topP, r.rng) : argmax(row);
      this.take(model, r, id, row[id], topK(row, r.params.topLogprobs));
    });
  }

  /** Appends the sampled token to row r, hands it to the sink, and finishes the row where it ends. */
  private take(model: CausalLm, r: Row, id: number, logprob: number, top: { id: number; logprob: number }[]): void {
    r.seq.push(id);
    r.generated++;
    this.totals.tokens++;
    let endedBySink: boolean;
    try {
      endedBySink = r.sink({ id, logprob, top });
    } catch (e) {
      finish(r, undefined, e);
      return;
    }
    if (endedBySink || r.stops.has(id)) finish(r, 'stop');
    else if (r.generated >= r.params.maxTokens || r.seq.length >= model.config.maxSeqLen) finish(r, 'length');
  }
}

/**
 * KV-cache slots the next step needs for `rows`: per model with a cache, the rows × the longest
 * row after the step, summed over models (each model's rows are padded to its longest). After
 * the step a row's cache holds its whole sequence (prompt + tokens generated so far): the step
 * appends the last sampled token, or a joining row's prefill runs the sequence.
 */
export function nextStepSlots(rows: Iterable<{ model: unknown; cached: boolean; seq: readonly unknown[] }>): number {
  const byModel = new Map<unknown, { rows: number; widest: number }>();
  for (const r of rows) {
    if (!r.cached) continue;
    const m = byModel.get(r.model) ?? { rows: 0, widest: 0 };
    byModel.set(r.model, { rows: m.rows + 1, widest: Math.max(m.widest, r.seq.length) });
  }
  let slots = 0;
  for (const m of byModel.values()) slots += m.rows * m.widest;
  return slots;
}

/** One turn of the event loop: I/O callbacks and timers run before the engine's next step. */
function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function finish(r: Row, reason: FinishReason | undefined, error?: unknown): void {
  if (r.done) return;
  r.done = true;
  r.unlisten?.();
  if (error !== undefined) r.reject(error);
  else r.resolve(reason as FinishReason);
}

function checkParams(model: CausalLm, prompt: readonly number[], p: GenerationParams): void {
  const { vocabSize, maxSeqLen } = model.config;
  if (prompt.length < 1) throw new ValidationError('prompt', 'must hold at least one token');
  prompt.forEach((t, i) => {
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize)
      throw new ValidationError(`prompt[${i}]`, `token id must be an integer in [0, ${vocabSize}), got ${t}`);
  });
  if (!Number.isInteger(p.maxTokens) || p.maxTokens < 1) throw new ValidationError('max_tokens', `must be an integer >= 1, got ${p.maxTokens}`);
  if (prompt.length + p.maxTokens > maxSeqLen) {
    throw new ValidationError(
      'max_tokens',
      `this model's maximum context length is ${maxSeqLen} tokens; the request asks for ${prompt.length + p.maxTokens} (${prompt.length} in the prompt, ${p.maxTokens} to generate)`,
    );
  }
  if (!(p.temperature >= 0 && Number.isFinite(p.temperature))) throw new ValidationError('temperature', `must be a finite number >= 0, got ${p.temperature}`);
  if (!(p.topP > 0 && p.topP <= 1)) throw new ValidationError('top_p', `must be in (0, 1], got ${p.topP}`);
  if (!Number.isInteger(p.topLogprobs) || p.topLogprobs < 0 || p.topLogprobs > 20)
    throw new ValidationError('top_logprobs', `must be an integer in [0, 20], got ${p.topLogprobs}`);
}

/** The most likely id (ties: the lower id). */
export function argmax(logp: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < logp.length; i++) if (logp[i] > logp[best]) best = i;
  return best;
}

/**
 * Draws from the smallest set of most likely tokens whose probability reaches `topP`
 * (ties: lower id first), renormalised, in float64. With `topP = 1` that is the whole
 * vocabulary, without sorting.
 */
export function drawTopP(logp: ArrayLike<number>, topP: number, rng: SeededRng): number {
  const n = logp.length;
  let order: number[];
  if (topP >= 1) {
    order = Array.from({ length: n }, (_, i) => i);
  } else {
    const sorted = Array.from({ length: n }, (_, i) => i).sort((a, b) => logp[b] - logp[a] || a - b);
    order = [];
    let mass = 0;
    for (const i of sorted) {
      order.push(i);
      mass += Math.exp(logp[i]);
      if (mass >= topP) break;
    }
  }
  let max = -Infinity;
  for (const i of order) max = Math.max(max, logp[i]);
  const weights = order.map((i) => Math.exp(logp[i] - max));
  const total = weights.reduce((a, b) => a + b, 0);
  let u = rng.nextFloat() * total;
  for (let j = 0; j < order.length; j++) {
    u -= weights[j];
    if (u < 0) return order[j];
  }
  for (let j = order.length - 1; j >= 0; j--) if (weights[j] > 0) return order[j];
  return order[0];
}

/** The k most likely (id, log-prob), most likely first, ties by lower id. */
export function topK(logp: ArrayLike<number>, k: number): { id: number; logprob: number }[] {
  if (k <= 0) return [];
  const best: { id: number; logprob: number }[] = [];
  for (let i = 0; i < logp.length; i++) {
    const v = logp[i];
    if (best.length === k && v <= best[k - 1].logprob) continue;
    let j = best.length < k ? best.length : k - 1;
    best[j] = { id: i, logprob: v };
    while (j > 0 && best[j - 1].logprob < v) {
      [best[j - 1], best[j]] = [best[j], best[j - 1]];
      j--;
    }
  }
  return best;
}
