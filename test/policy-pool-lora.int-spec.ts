import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import * as tf from '@tensorflow/tfjs';
import { initTfBackend, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, topicCatalog } from '@srpo/events';
import { CheckpointStore, Policy, SeededRng, tokenLogProbs, type CausalLm } from '@srpo/policy';
import { attachLora, isLlamaModel, loadHfModel, type LlamaModel, type LoraAdapter } from '@srpo/hf';
import { CompletionService, GenerationEngine, parseRequest, PolicyPool, ServedModels } from '@srpo/serving';
import { ensureKafka, sleep } from '@srpo/testing';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');

async function scored(model: CausalLm, context: number[], response: number[]): Promise<number[]> {
  const { logProbs, mask } = tokenLogProbs(model, [{ contextTokens: context, responseTokens: response }], { temperature: 1 });
  const out = Array.from(await logProbs.data()).slice(0, response.length);
  logProbs.dispose();
  mask.dispose();
  return out;
}

/**
 * The policy pool of `srpo serve` (shareLoraBases) on the real broker: LoRA versions of a
 * Hugging Face policy announced on policy-versions are swapped in as views of one base, so the
 * base is held once however many versions are alive, and each version computes what the same
 * adapter attached to its own copy of the base computes. A request in flight on the old version
 * finishes on it.
 */
describe('policy pool: LoRA versions over one shared base', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'pool-lora-test' });
  const codec = new EventCodec();
  const catalog = topicCatalog({ prefix: `srpo.pool-lora-test.${Date.now()}.`, rawPartitions: 1, derivedPartitions: 1 });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-pool-lora-'));
  const store = new CheckpointStore(tmp);
  let trainer: LlamaModel;
  let adapter: LoraAdapter;
  let pool: PolicyPool;
  let models: ServedModels;

  /** The learner's side: version v of `actor` with seeded factors, saved. */
  async function save(v: number): Promise<string> {
    const rng = new SeededRng(500 + v);
    for (const variable of adapter.weights.values()) tf.tidy(() => variable.assign(tf.tensor(rng.normalArray(variable.size, 0.3), variable.shape)));
    return (await store.save(new Policy('actor', trainer, v))).weightsHash;
  }

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    trainer = loadHfModel(QWEN2).model;
    adapter = attachLora(trainer, { r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj', 'up_proj'] }, { seed: 1 });
    await save(0);
    pool = new PolicyPool({
      kafka,
      catalog,
      rolePolicies: { actor: 'actor' },
      checkpointDir: tmp,
      startupTimeoutMs: 10_000,
      shareLoraBases: true,
      retire: (old) => models.retire(old),
    });
    models = new ServedModels(pool.registry);
    await pool.start();
  }, 60_000);

  afterAll(async () => {
    await pool?.stop();
    trainer?.dispose();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('version 1 becomes a view of the base version 0 used; each computes its own adapter; v0 finishes its request and is disposed, the base stays', async () => {
    const v0 = pool.registry.get('actor').model;
    if (!isLlamaModel(v0)) throw new Error('not an hf model');
    expect(pool.sharedBases).toBe(1);
    const engine = new GenerationEngine({ maxBatchRows: 16, maxQueuedRows: 64 });
    const service = new CompletionService(models, engine);
    // A request on v0, started before v1 is announced.
    const before = service.run(parseRequest('completions', { model: 'actor', prompt: 'hello', max_tokens: 24, temperature: 1, seed: 1 }));
    const hash = await save(1);
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({
      topic: catalog.policyVersions.name,
      acks: -1,
      messages: [
        {
          key: 'actor',
          value: codec.encode('PolicyVersion', {
            policyId: 'actor',
            version: 1,
            weightsHash: hash,
            checkpointUri: pathToFileURL(store.dirFor('actor', 1)).href,
            updateId: null,
            eventTimeMs: Date.now(),
          }),
        },
      ],
    });
    await producer.disconnect();
    const deadline = Date.now() + 30_000;
    while (pool.applyPending().length === 0) {
      if (Date.now() > deadline) throw new Error('version 1 was never loaded');
      await sleep(50);
    }
    const v1 = pool.registry.get('actor').model;
    if (!isLlamaModel(v1)) throw new Error('not an hf model');
    expect(pool.registry.get('actor').version).toBe(1);
    expect(pool.sharedBases).toBe(1);
    // The same base variables, not a copy.
    for (const [name, variable] of v1.baseWeights) expect(variable).toBe(v0.baseWeights.get(name));
    const after = await service.run(parseRequest('completions', { model: 'actor', prompt: 'hello', max_tokens: 8, temperature: 1, seed: 2 }));
    const old = await before;
    expect(old.result.policyVersion).toBe(0);
    expect(after.result.policyVersion).toBe(1);
    // Independent references: each version's checkpoint loaded the ordinary way (its own base copy).
    const ref0 = (await store.load('actor', 0)).policy;
    const v0OfV1 = await scored(ref0.model, after.result.promptTokenIds, after.result.choices[0].tokenIds);
    ref0.dispose();
    // (the versions differ enough for the check below to tell them apart)
    expect(Math.max(...after.result.choices[0].draws.map((d, j) => Math.abs(d.logprob - v0OfV1[j])))).toBeGreaterThan(1e-2);
    for (const [v, run] of [
      [0, old],
      [1, after],
    ] as const) {
      const ref = (await store.load('actor', v)).policy;
      const expected = await scored(ref.model, run.result.promptTokenIds, run.result.choices[0].tokenIds);
      run.result.choices[0].draws.forEach((d, j) => expect(Math.abs(d.logprob - expected[j])).toBeLessThan(1e-4));
      ref.dispose();
    }
    // v0 ended its request: disposed (its adapter only); the base still serves v1.
    expect(models.retiredCount).toBe(0);
    expect(v0.isDisposed).toBe(true);
    expect([...v1.baseWeights.values()].every((w) => !w.isDisposed)).toBe(true);
    await engine.drain();
  }, 60_000);
});
