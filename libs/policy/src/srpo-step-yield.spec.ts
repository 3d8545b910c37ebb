import { weightsHash } from './checkpoint-store';
import { microBatchRows } from './micro-batch';
import { Policy } from './policy';
import { SrpoTrainer, type ActiveSet, type SrpoTrainerConfig } from './srpo-step';
import { makeSets, nativeBackend, TINY } from './test/fixtures';

/**
 * The update's yield points (SrpoCallOptions.yieldPoint, what lets a Kafka consumer heartbeat
 * while native TensorFlow trains): the same weights, Adam state and diagnostics with them as
 * without, bit for bit, and the event loop runs at each of them.
 */
async function train(config: SrpoTrainerConfig, yieldPoint?: () => Promise<void>) {
  const policy = Policy.create('p', TINY, 5);
  const sets = await makeSets(policy, 4, 4);
  const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 3e-3 }, ...config });
  try {
    const result = await trainer.update(sets, { yieldPoint });
    const state = await trainer.optimizer.getState();
    const moments = [...state.m.values(), ...state.v.values()].flatMap((x) => Array.from(x));
    return { sets, result, moments, hash: await weightsHash(policy) };
  } finally {
    trainer.dispose();
    policy.dispose();
  }
}

/** Model input lengths of the sets' members (TINY's 16 positions hold every pair whole). */
function inputLengths(sets: ActiveSet[]): number[] {
  return sets.flatMap((s) => s.members.map((m) => m.contextTokens.length + m.responseTokens.length - 1));
}

describe('SrpoTrainer.update with a yield point', () => {
  beforeAll(nativeBackend);

  it.each<[string, SrpoTrainerConfig & { epochs: number }]>([
    ['micro-batches, a proximal pass and two epochs', { microBatchTokens: 20, epochs: 2, correction: { correction: 'tis' } }],
    ['one pass, two epochs', { epochs: 2 }],
  ])('%s: the same update bit for bit, and timers run at each yield', async (_name, config) => {
    const plain = await train(config);
    let ticks = 0;
    let timer = setTimeout(function tick() {
      ticks++;
      timer = setTimeout(tick, 0);
    }, 0);
    const ticksAtYield: number[] = [];
    let yielded: Awaited<ReturnType<typeof train>>;
    try {
      yielded = await train(config, async () => {
        ticksAtYield.push(ticks);
        // A turn of the event loop through its timers, as the sink's keepAlive takes one.
        await new Promise((r) => setTimeout(r, 0));
      });
    } finally {
      clearTimeout(timer);
    }
    expect(yielded.hash).toBe(plain.hash);
    expect(yielded.moments).toEqual(plain.moments);
    expect(yielded.result).toEqual(plain.result);

    // Where it yields: after each micro-batch of the proximal pass and of both passes of the
    // step (one piece each without micro-batches), and after each epoch; with a correction and
    // micro-batches the first epoch's first pass is the proximal one (not run again).
    const chunks = config.microBatchTokens ? microBatchRows(inputLengths(plain.sets), config.microBatchTokens).length : 1;
    expect(chunks).toBeGreaterThan(config.microBatchTokens ? 1 : 0);
    const proximal = config.correction ? chunks : 0;
    const perEpoch = (config.microBatchTokens ? 2 * chunks : 1) + 1;
    const reused = config.correction && config.microBatchTokens ? chunks : 0;
    expect(ticksAtYield).toHaveLength(proximal + config.epochs * perEpoch - reused);
    // The other timer ran between consecutive yields: the event loop was not held.
    for (let i = 1; i < ticksAtYield.length; i++) expect(ticksAtYield[i]).toBeGreaterThan(ticksAtYield[i - 1]);
  });
});
