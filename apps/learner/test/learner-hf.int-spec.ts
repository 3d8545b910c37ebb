import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { initTfBackend, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, toPlain, type AdvantageGroup } from '@srpo/events';
import { loadCheckpoint, sampleBatch, weightsHash } from '@srpo/policy';
import { attachLora, detachLora, hfDirectoryHash, loadHfModel, scoreCases, type LlamaModel, type LoraConfig } from '@srpo/hf';
import { activeSet, advantageGroup, ensureKafka, member, produceGroups, sleep, spawnApp, tempDir, uniquePrefix, waitForExit } from '@srpo/testing';

/**
 * The learner trains a Hugging Face model over Kafka: SRPO_MODEL_DIR names the qwen2
 * fixture (GQA 4:1, tied embeddings, q/k/v biases, BF16 on disk) as version 0. The groups'
 * responses are sampled from that model here, with their true behaviour log-probs, so the
 * first ratios are 1. The trained version's checkpoint is an `hf-llama` policy naming its
 * base directory by hash; exported, it loads in Python transformers with our log-probs.
 */
const root = repoRoot();
const BASE = path.join(root, 'libs', 'hf', 'fixtures', 'qwen2');
const GROUPS = 3;

interface Sampled {
  context: number[];
  response: number[];
  logpOld: number[];
}

async function sampleResponses(model: LlamaModel, n: number): Promise<Sampled[]> {
  const contexts = Array.from({ length: n }, (_, i) => [10 + i, 40 + 3 * i, 7, 99]);
  const out = await sampleBatch(model, contexts, { maxNewTokens: 6, temperature: 1, seed: 11 });
  return out.map((s, i) => ({ context: contexts[i], response: s.tokens, logpOld: s.logProbs }));
}

async function meanLogProb(model: LlamaModel, s: Sampled[]): Promise<number> {
  const scored = await scoreCases(
    model,
    s.map((x) => ({ promptTokenIds: x.context, responseTokenIds: x.response })),
  );
  const all = scored.flatMap((c) => c.logprobs);
  return all.reduce((a, b) => a + b, 0) / all.length;
}

const LORA: Partial<LoraConfig> = { r: 4, alpha: 8, targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] };

describe.each([
  ['full weights', undefined],
  ['a LoRA adapter', LORA],
] as [string, Partial<LoraConfig> | undefined][])('learner on a Hugging Face model (SRPO_MODEL_DIR), training %s', (_label, lora) => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'learner-hf-test' });

  it('trains it over Kafka, checkpoints it as hf-llama, verifies an update bit for bit; srpo model score/export read it from the store, and the exports load in transformers and peft', async () => {
    await initTfBackend('tensorflow');
    const base = loadHfModel(BASE);
    const samples = await sampleResponses(base.model, GROUPS * 2);
    const positive = samples.filter((_, i) => i % 2 === 0);
    const negative = samples.filter((_, i) => i % 2 === 1);
    const groups: AdvantageGroup[] = Array.from({ length: GROUPS }, (_, g) =>
      advantageGroup(
        `g${g}`,
        [0, 1].map((k) => {
          const s = samples[2 * g + k];
          const m = member({ outputId: `g${g}/o${k}`, context: s.context, response: s.response, logpOld: s.logpOld, version: 0 });
          return { set: activeSet(`g${g}/s${k}`, [m]), advantage: k === 0 ? 1 : -1 };
        }),
      ),
    );
    const prefix = uniquePrefix('learner-hf');
    const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const codec = new EventCodec();
    await produceGroups(kafka, catalog.advantageGroups.name, groups);

    const dir = tempDir('hf');
    const port = 24_000 + Math.floor(Math.random() * 1000);
    const log = path.join(dir, 'learner.log');
    const child = spawnApp(
      'learner',
      {
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_POLICY_ID: 'solver',
        SRPO_CONSUMER_GROUP: `${prefix}learner`,
        SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'),
        SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
        SRPO_SETS_PER_UPDATE: '2',
        SRPO_MODEL_DIR: BASE,
        SRPO_LR: '0.01',
        SRPO_MAX_POLICY_LAG: '100',
        SRPO_SESSION_TIMEOUT_MS: '6000',
        SRPO_HTTP_PORT: String(port),
        SRPO_BACKEND: 'tensorflow',
        SRPO_LOG_LEVEL: 'info',
        // The LoRA run also takes each sequence in a micro-batch of its own (2 per update), and verify must follow.
        ...(lora ? { SRPO_LORA: JSON.stringify(lora), SRPO_SEED: '5', SRPO_MICRO_BATCH_TOKENS: '12' } : {}),
      },
      log,
    );
    let verified: { ok: boolean; failure?: string; recomputedWeightsHashAfter?: string } | undefined;
    let microBatches: number | undefined;
    let updates: { versionBefore: number; versionAfter: number; weightsHashBefore: string; weightsHashAfter: string }[] = [];
    try {
      const deadline = Date.now() + 90_000;
      while (updates.length < GROUPS && Date.now() < deadline) {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`learner exited (${child.exitCode ?? child.signalCode}); log ${log}:\n${fs.readFileSync(log, 'utf8').slice(-3000)}`);
        updates = (await fetch(`http://127.0.0.1:${port}/updates?policy=solver`)
          .then((r) => (r.ok ? r.json() : []))
          .catch(() => [])) as typeof updates;
        await sleep(500);
      }
      // audit verify: re-run update 2 from the v1 checkpoint with the recorded inputs and hyperparameters.
      if (updates.length >= 2) {
        const res = await fetch(`http://127.0.0.1:${port}/updates/${encodeURIComponent((updates[1] as unknown as { updateId: string }).updateId)}/verify`, {
          method: 'POST',
        });
        verified = (await res.json()) as typeof verified;
        const detail = (await (
          await fetch(`http://127.0.0.1:${port}/updates/${encodeURIComponent((updates[1] as unknown as { updateId: string }).updateId)}`)
        ).json()) as { diagnostics: Record<string, number> };
        microBatches = detail.diagnostics['memory/micro_batches'];
      }
    } finally {
      child.kill('SIGTERM');
      await waitForExit(child);
    }
    expect(fs.readFileSync(log, 'utf8')).not.toMatch(/"level":"error"/);
    expect(updates.map((u) => [u.versionBefore, u.versionAfter])).toEqual([
      [0, 1],
      [1, 2],
      [2, 3],
    ]);
    expect(verified).toMatchObject({ ok: true, recomputedWeightsHashAfter: updates[1].weightsHashAfter });
    expect(microBatches).toBe(lora ? 2 : 1);
    // Version 0 is the directory's weights, as loaded here (for LoRA: the adapter at init, B = 0, seeded by SRPO_SEED).
    if (lora) attachLora(base.model, lora, { seed: 5 });
    expect(updates[0].weightsHashBefore).toBe(await weightsHash(base.model));
    if (lora) detachLora(base.model);

    const ckpt = await loadCheckpoint(path.join(dir, 'checkpoints', 'solver', 'v3'));
    const trained = ckpt.policy.model as LlamaModel;
    try {
      expect([ckpt.manifest.modelKind, ckpt.manifest.base?.hash, ckpt.manifest.weightsHash]).toEqual([
        'hf-llama',
        hfDirectoryHash(BASE),
        updates[2].weightsHashAfter,
      ]);
      if (lora) {
        // The checkpoint holds the adapter only: 2 layers x 7 modules x (A, B), against the base's 26 tensors.
        expect(ckpt.manifest.lora).toMatchObject(lora);
        expect(trained.weightNames()).toHaveLength(28);
        expect(trained.weightNames().every((n) => /lora_[AB]\.weight$/.test(n))).toBe(true);
      }
      // SRPO moved probability towards the positive-advantage responses and away from the negative ones.
      expect(await meanLogProb(trained, positive)).toBeGreaterThan(await meanLogProb(base.model, positive));
      expect(await meanLogProb(trained, negative)).toBeLessThan(await meanLogProb(base.model, negative));

      const cases = samples.map((x) => ({ promptTokenIds: x.context, responseTokenIds: x.response }));
      const ours = await scoreCases(trained, cases);
      const work = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-hf-export-'));
      const casesFile = path.join(work, 'cases.json');
      fs.writeFileSync(casesFile, JSON.stringify(cases));
      const cliEnv = { ...process.env, SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'), SRPO_BACKEND: 'tensorflow', SRPO_LOG_LEVEL: 'error' };
      const srpo = (...args: string[]) => {
        const r = spawnSync(process.execPath, [path.join(root, 'bin', 'srpo.js'), ...args], { encoding: 'utf8', env: cliEnv });
        if (r.status !== 0) throw new Error(`srpo ${args.join(' ')} exited ${r.status}:\n${r.stderr.slice(-2000)}`);
        return r.stdout;
      };
      const python = (script: string, ...args: string[]): number[][] => {
        const py = spawnSync('python3', [path.join(root, 'scripts', 'reference', script), ...args], { encoding: 'utf8' });
        if (py.status !== 0) throw new Error(`${script} failed (python3 -m pip install -r scripts/reference/requirements.txt):\n${py.stderr.slice(-2000)}`);
        return JSON.parse(py.stdout) as number[][];
      };
      const close = (theirs: number[][]) => theirs.forEach((t, i) => t.forEach((v, j) => expect(Math.abs(v - ours[i].logprobs[j])).toBeLessThan(1e-4)));
      // The recorded version, scored by the CLI from the audit store's checkpoint.
      const scored = JSON.parse(srpo('model', 'score', '--model', 'policy:solver@v3', '--in', casesFile)) as { logprobs: number[] }[];
      close(scored.map((c) => c.logprobs));
      // Full weights (a LoRA policy merged into its base) for transformers / vLLM / SGLang.
      const hfOut = path.join(work, 'hf');
      srpo('model', 'export', '--policy', 'solver', '--version', '3', '--format', 'hf', '--dtype', 'F32', '--out', hfOut);
      close(python('score_hf.py', hfOut, casesFile));
      if (lora) {
        // The adapter alone, in the PEFT layout, on the untouched base.
        const peftOut = path.join(work, 'peft');
        srpo('model', 'export', '--policy', 'solver', '--version', '3', '--format', 'peft', '--out', peftOut);
        close(python('score_peft.py', BASE, peftOut, casesFile));
      } else {
        expect(() => srpo('model', 'export', '--policy', 'solver', '--version', '3', '--format', 'peft', '--out', path.join(work, 'peft'))).toThrow(
          /has no adapter: use --format hf/,
        );
      }
    } finally {
      ckpt.policy.dispose();
      base.model.dispose();
      tf.disposeVariables();
    }

    const versions = (await readTopicsToEnd(kafka, [catalog.policyVersions.name])).map((r) => toPlain(codec.decodeAs('PolicyVersion', r.value)));
    expect(versions.find((v) => v.version === 3)?.weightsHash).toBe(updates[2].weightsHashAfter);
  });
});
