import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, initTfBackend, repoRoot } from '@srpo/core';
import { SeededRng } from '@srpo/policy';
import { attachLora, loadHfModel, type LlamaModel } from '@srpo/hf';
import { GenerationEngine, type GenerationParams, type TokenDraw } from './generation-engine';

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

  it('refuses a choice that could never fit the budget, and holds back one that does not fit now until rows leave', async () => {
    const engine = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 16, kvCacheTokens: 20 });
    expect(() => engine.generate(model, [1, 2, 3, 4, 5], { ...GREEDY, maxTokens: 16 }, () => false)).toThrow(
      expect.objectContaining({ code: ErrorCode.VALIDATION_FAILED, field: 'max_tokens' }),
    );
    // 12 slots each: two together would need 24 > 20, so the second starts once the first has finished.
    const events: string[] = [];
    const run = (name: string): Promise<unknown> =>
      engine
        .generate(model, [1, 2, 3, 4], { ...GREEDY, maxTokens: 8 }, () => {
          if (!events.includes(`${name} first token`)) events.push(`${name} first token`);
          return false;
        })
        .then(() => events.push(`${name} done`));
    await Promise.all([run('a'), run('b')]);
    expect(events).toEqual(['a first token', 'a done', 'b first token', 'b done']);
    expect(() => new GenerationEngine({ maxBatchRows: 1, maxQueuedRows: 1, kvCacheTokens: -1 })).toThrow(/kvCacheTokens/);
  });
});
