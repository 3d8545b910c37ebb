import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, initTfBackend, repoRoot } from '@srpo/core';
import { SeededRng, type CausalLm } from '@srpo/policy';
import { attachLora, loadHfModel, type LlamaModel } from '@srpo/hf';
import { GenerationCancelled, GenerationEngine, nextStepSlots, type GenerationParams, type TokenDraw } from './generation-engine';

const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');
const GREEDY: GenerationParams = { maxTokens: 12, temperature: 0, topP: 1, stopIds: [], topLogprobs: 2 };

interface Choice {
  draws: TokenDraw[];
  finish: string;
}

async function choice(engine: GenerationEngine, model: LlamaModel, prompt: number[], params: GenerationParams): Promise<Choice> {
  const draws: TokenDraw[] = [];
  const finish = await engine.generate(model, prompt, params, (d) => {
    draws.push(d);
    return false;
  });
  return { draws, finish };
}

/** Concurrent requests (one with n = 3 choices) of different prompt lengths and lengths to generate. */
function workload(engine: GenerationEngine, model: LlamaModel): Promise<Choice[]> {
  const prompts = [
    [5, 9, 33],
    [7, 1, 2, 3, 4, 5, 6, 8, 40],
    [11, 12],
    [7, 1, 2, 3, 4, 5, 6, 8, 40],
    [7, 1, 2, 3, 4, 5, 6, 8, 40],
  ];
  return Promise.all(prompts.map((p, i) => choice(engine, model, p, { ...GREEDY, maxTokens: 6 + 3 * i })));
}

describe.each([
  ['qwen2', false],
  ['llama', true],
])('generation with a KV cache against without (%s, LoRA %s)', (fixture, lora) => {
  let model: LlamaModel;
  beforeAll(async () => {
    await initTfBackend('tensorflow');
    model = loadHfModel(path.join(FIXTURES, fixture)).model;
    if (lora) {
      const adapter = attachLora(model, { r: 4, targetModules: ['q_proj', 'v_proj', 'down_proj'] });
      const rng = new SeededRng(3);
      for (const v of adapter.weights.values()) tf.tidy(() => v.assign(tf.tensor(rng.normalArray(v.size, 0.1), v.shape)));
    }
  });
  afterAll(() => model.dispose());

  it('greedy choices are the same ids, with log-probs within 1e-5, and a request’s n choices share one prefill', async () => {
    const cached = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 16 });
    const plain = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 16, kvCacheTokens: 0 });
    const [a, b] = [await workload(cached, model), await workload(plain, model)];
    // Three distinct prompts: three prefills for five choices; the uncached engine makes none.
    expect([cached.totals.prefills, plain.totals.prefills]).toEqual([3, 0]);
    expect(a.map((c) => c.draws.map((d) => d.id))).toEqual(b.map((c) => c.draws.map((d) => d.id)));
    a.forEach((c, i) => {
      expect(c.finish).toBe('length');
      c.draws.forEach((d, j) => {
        const ref = b[i].draws[j];
        expect(Math.abs(d.logprob - ref.logprob)).toBeLessThan(1e-5);
        expect(d.top.map((t) => t.id)).toEqual(ref.top.map((t) => t.id));
      });
    });
    expect(cached.totals.tokens).toBe(a.reduce((n, c) => n + c.draws.length, 0));
  });
});

describe('the engine and the event loop, and the KV-cache budget', () => {
  let model: LlamaModel;
  beforeAll(async () => {
    await initTfBackend('tensorflow');
    model = loadHfModel(path.join(FIXTURES, 'qwen2')).model;
  });
  afterAll(() => model.dispose());

  it('a short request sent during a long generation is answered before the long one ends, and timers fire meanwhile', async () => {
    const engine = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 16 });
    const events: string[] = [];
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    let tokens = 0;
    let ticksAtEnd = -1;
    let short: Promise<unknown> | undefined;
    try {
      const long = engine.generate(model, [5, 9, 33], { ...GREEDY, maxTokens: 60 }, () => {
        tokens++;
        // The short request is sent from a timer, which runs only if the engine lets the event loop turn.
        if (tokens === 5)
          setTimeout(() => {
            events.push(`short sent at ${tokens}`);
            short = choice(engine, model, [7, 8], { ...GREEDY, maxTokens: 3 }).then(() => events.push('short done'));
          }, 0);
        if (tokens === 60) ticksAtEnd = ticks;
        return false;
      });
      await long;
      events.push('long done');
      await short;
    } finally {
      clearInterval(timer);
    }
    expect(events[0]).toMatch(/^short sent at \d+$/);
    expect(Number(events[0].split(' ').pop())).toBeLessThan(60);
    expect(events.slice(1)).toEqual(['short done', 'long done']);
    expect(ticksAtEnd).toBeGreaterThan(5);
  });

  it('a choice whose sink throws leaves the batch at once; the others go on as if alone', async () => {
    const engine = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 16 });
    const alone = await choice(engine, model, [7, 1, 2, 3, 4, 5], GREEDY);
    let calls = 0;
    const failing = engine.generate(model, [5, 9, 33], GREEDY, () => {
      if (++calls === 3) throw new Error('client went away');
      return false;
    });
    const [failed, together] = await Promise.allSettled([failing, choice(engine, model, [7, 1, 2, 3, 4, 5], GREEDY)]);
    expect(failed).toMatchObject({ status: 'rejected', reason: { message: 'client went away' } });
    expect(calls).toBe(3);
    expect(together.status === 'fulfilled' && together.value.draws.map((d) => d.id)).toEqual(alone.draws.map((d) => d.id));
    expect(engine.inFlight(model)).toBe(0);
  });

  it('an aborted choice leaves the queue or the batch and frees its KV-cache slots; the others go on as if alone', async () => {
    const engine = new GenerationEngine({ maxBatchRows: 2, maxQueuedRows: 16 });
    const alone = await choice(engine, model, [7, 1, 2, 3, 4, 5], { ...GREEDY, maxTokens: 8 });
    const [long, waiting] = [new AbortController(), new AbortController()];
    const slotsAt: number[] = [];
    let longTokens = 0;
    let waitingTokens = 0;
    const longRun = engine.generate(
      model,
      [5, 9, 33, 12, 40, 41, 42, 43, 44, 45],
      { ...GREEDY, maxTokens: 40 },
      () => {
        // Aborted between steps (the way a socket closes), and the third choice while it still waits for a batch row.
        if (++longTokens === 2) {
          setImmediate(() => long.abort());
          waiting.abort();
        }
        return false;
      },
      long.signal,
    );
    const together = engine.generate(model, [7, 1, 2, 3, 4, 5], { ...GREEDY, maxTokens: 8 }, () => {
      slotsAt.push(engine.kvSlots);
      return false;
    });
    // The batch holds two rows: this one waits.
    const waitingRun = engine.generate(
      model,
      [3, 4],
      GREEDY,
      () => {
        waitingTokens++;
        return false;
      },
      waiting.signal,
    );
    const [a, b, c] = await Promise.allSettled([longRun, waitingRun, together]);
    await engine.drain();
    expect(a).toMatchObject({ status: 'rejected', reason: expect.any(GenerationCancelled) });
    expect(b).toMatchObject({ status: 'rejected', reason: expect.any(GenerationCancelled) });
    expect(c).toEqual({ status: 'fulfilled', value: 'length' });
    expect([longTokens, waitingTokens]).toEqual([2, 0]);
    // Two rows padded to the longer (10-token) prompt, then, once the long row is cancelled, the other alone (6 + 2 tokens):
    // its slots are freed before the next step.
    expect(slotsAt.slice(0, 3)).toEqual([2 * 10, 2 * 11, 6 + 2]);
    expect(slotsAt).toHaveLength(alone.draws.length);
    expect([engine.totals.cancelled, engine.kvSlots, engine.inFlight(model)]).toEqual([2, 0, 0]);
    // A choice aborted before it is queued never starts.
    await expect(engine.generate(model, [1, 2], GREEDY, () => false, AbortSignal.abort())).rejects.toBeInstanceOf(GenerationCancelled);
    expect(engine.totals.cancelled).toBe(2);
  });

  it('refuses a choice that could never fit the budget; two that outgrow it together go on one at a time, the later preempted', async () => {
    const engine = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 16, kvCacheTokens: 20 });
    expect(() => engine.generate(model, [1, 2, 3, 4, 5], { ...GREEDY, maxTokens: 16 }, () => false)).toThrow(
      expect.objectContaining({ code: ErrorCode.VALIDATION_FAILED, field: 'max_tokens' }),
    );
    // Prompts of 4, 8 tokens each: step k holds 2 × (3 + k) slots, so both run until step 8 would
    // need 22 > 20. Then b, the later, leaves with 7 tokens, a finishes alone, and b is prefilled
    // again (11 positions) for its last token.
    const events: string[] = [];
    const run = (name: string): Promise<unknown> =>
      engine
        .generate(model, [1, 2, 3, 4], { ...GREEDY, maxTokens: 8 }, () => {
          if (!events.includes(`${name} first token`)) events.push(`${name} first token`);
          return false;
        })
        .then(() => events.push(`${name} done`));
    await Promise.all([run('a'), run('b')]);
    expect(events).toEqual(['a first token', 'b first token', 'a done', 'b done']);
    expect([engine.totals.preemptions, engine.totals.recomputedTokens, engine.totals.prefills]).toEqual([1, 7, 2]);
    expect(engine.kvSlots).toBe(0);
    expect(() => new GenerationEngine({ maxBatchRows: 1, maxQueuedRows: 1, kvCacheTokens: -1 })).toThrow(/kvCacheTokens/);
  });
});

describe('nextStepSlots', () => {
  it('counts per model rows × the longest sequence, summed over models; rows without a cache count nothing', () => {
    const [a, b] = [{}, {}];
    const row = (model: object, length: number, cached = true) => ({ model, cached, seq: new Array<number>(length).fill(0) });
    // a: 3 rows, longest 7 → 21; b: 2 rows, longest 4 → 8; the uncached row of length 50 → 0.
    expect(nextStepSlots([row(a, 3), row(b, 4), row(a, 7), row(b, 1), row(a, 5), row(a, 50, false)])).toBe(29);
    expect(nextStepSlots([])).toBe(0);
  });
});

describe('preemption under a small KV-cache budget (two models sharing it)', () => {
  let models: LlamaModel[];
  beforeAll(async () => {
    await initTfBackend('tensorflow');
    models = [loadHfModel(path.join(FIXTURES, 'qwen2')).model, loadHfModel(path.join(FIXTURES, 'llama')).model];
  });
  afterAll(() => models.forEach((m) => m.dispose()));

  /** Greedy and seeded sampled choices (top-p among them, and one request's n = 3 over one prompt) of both models. */
  const specs: { m: number; prompt: number[]; params: Partial<GenerationParams> }[] = [
    { m: 0, prompt: [5, 9, 33], params: { maxTokens: 20 } },
    { m: 0, prompt: [7, 1, 2, 3, 4, 5, 6, 8, 40], params: { maxTokens: 14, temperature: 1, seed: 1 } },
    { m: 1, prompt: [11, 12], params: { maxTokens: 24 } },
    { m: 0, prompt: [20, 21, 22, 23], params: { maxTokens: 18, temperature: 0.8, topP: 0.9, seed: 5 } },
    ...[7, 8, 9].map((seed) => ({ m: 1, prompt: [3, 4, 5, 6, 7], params: { maxTokens: 16, temperature: 1, seed } })),
    { m: 0, prompt: [30], params: { maxTokens: 22 } },
    { m: 1, prompt: [40, 41, 42, 43, 44, 45], params: { maxTokens: 12, temperature: 1.2, seed: 11 } },
  ];

  async function run(engine: GenerationEngine, onToken: () => void = () => undefined): Promise<Choice[]> {
    return Promise.all(
      specs.map(async ({ m, prompt, params }) => {
        const draws: TokenDraw[] = [];
        const finish = await engine.generate(models[m], prompt, { ...GREEDY, ...params }, (d) => {
          draws.push(d);
          onToken();
          return false;
        });
        return { draws, finish };
      }),
    );
  }

  it('rows preempted mid-generation finish with the ids and log-probs of an unconstrained run; none lost or duplicated; the budget holds at every step', async () => {
    const reference = await run(new GenerationEngine({ maxBatchRows: 16, maxQueuedRows: 16 }));
    const budget = 60;
    const engine = new GenerationEngine({ maxBatchRows: 16, maxQueuedRows: 16, kvCacheTokens: budget });
    // Every sink call comes after its step grew the caches and before finished rows leave: the most slots the step held.
    const seen: number[] = [];
    const out = await run(engine, () => seen.push(engine.kvSlots));
    expect(Math.max(...seen)).toBeLessThanOrEqual(budget);
    // The budget was in use (unconstrained, the rows would need well over 100 slots together).
    expect(Math.max(...seen)).toBeGreaterThan(budget * 0.75);
    expect(engine.totals.preemptions).toBeGreaterThanOrEqual(2);
    expect(engine.totals.recomputedTokens).toBeGreaterThan(0);
    out.forEach((c, i) => {
      expect(c.finish).toBe('length');
      expect(c.draws.map((d) => d.id)).toEqual(reference[i].draws.map((d) => d.id));
      expect(c.draws).toHaveLength(specs[i].params.maxTokens as number);
      c.draws.forEach((d, j) => expect(Math.abs(d.logprob - reference[i].draws[j].logprob)).toBeLessThan(1e-5));
    });
    // The n = 3 choices drew apart: the comparison covers different sequences sharing one prompt.
    expect(new Set(out.slice(4, 7).map((c) => c.draws.map((d) => d.id).join(','))).size).toBe(3);
    expect(engine.totals.tokens).toBe(out.reduce((n, c) => n + c.draws.length, 0));
    expect(engine.totals.rows).toBe(specs.length);
    expect(models.map((m) => engine.inFlight(m))).toEqual([0, 0]);
    expect(engine.kvSlots).toBe(0);
  });
});

describe('greedy sampling without alternatives (only the argmax and its log-prob leave TensorFlow)', () => {
  let model: LlamaModel;
  beforeAll(async () => {
    await initTfBackend('tensorflow');
    model = loadHfModel(path.join(FIXTURES, 'llama')).model;
  });
  afterAll(() => model.dispose());

  it('gives the ids and log-probs, bit for bit, of the path that reads the whole distribution', async () => {
    const engine = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 16 });
    const prompts = [
      [5, 9, 33],
      [7, 1, 2, 3, 4, 5, 6, 8, 40],
      [11, 12],
    ];
    // topLogprobs 2 reads the whole log-softmax in JavaScript (argmax there); 0 takes ArgMax and Max.
    const run = (topLogprobs: number): Promise<Choice[]> => Promise.all(prompts.map((p) => choice(engine, model, p, { ...GREEDY, topLogprobs })));
    const [full, fast] = [await run(2), await run(0)];
    expect(fast.map((c) => c.draws.map((d) => d.id))).toEqual(full.map((c) => c.draws.map((d) => d.id)));
    expect(fast.map((c) => c.draws.map((d) => d.logprob))).toEqual(full.map((c) => c.draws.map((d) => d.logprob)));
    fast.forEach((c) => c.draws.forEach((d) => expect(d.top).toEqual([])));
  });

  it('breaks ties towards the lower id, as the JavaScript argmax does', async () => {
    // A stand-in model whose every next-token distribution has its maximum at ids 2, 4 and 5.
    const scores = [0, 1, 3, 2, 3, 3];
    const fake = {
      kind: 'fixed-logits',
      config: { vocabSize: scores.length, maxSeqLen: 64 },
      logits2d: (tokens: tf.Tensor2D, _t?: number, rows?: tf.Tensor1D) =>
        tf.tile(tf.tensor2d([scores]), [rows?.shape[0] ?? tokens.shape[0] * tokens.shape[1], 1]),
    } as unknown as CausalLm;
    const engine = new GenerationEngine({ maxBatchRows: 4, maxQueuedRows: 4 });
    // One after the other: a batch with a row that reports alternatives reads every row's whole distribution.
    const fast = await choice(engine, fake as unknown as LlamaModel, [1, 2], { ...GREEDY, maxTokens: 3, topLogprobs: 0 });
    const full = await choice(engine, fake as unknown as LlamaModel, [1, 2], { ...GREEDY, maxTokens: 3, topLogprobs: 1 });
    expect(fast.draws.map((d) => d.id)).toEqual([2, 2, 2]);
    expect(full.draws.map((d) => d.id)).toEqual([2, 2, 2]);
    // log softmax at the max: 3 − log(1 + e + 3e³ + e²) (float32 rounding aside).
    const expected = 3 - Math.log(Math.exp(0) + Math.exp(1) + 3 * Math.exp(3) + Math.exp(2));
    expect(Math.abs(fast.draws[0].logprob - expected)).toBeLessThan(1e-6);
  });
});
