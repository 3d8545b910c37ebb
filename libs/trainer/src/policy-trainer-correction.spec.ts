import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { initTfBackend, repoRoot, ValidationError } from '@srpo/core';
import { loadHfModel, resolveLoraConfig } from '@srpo/hf';
import { Policy } from '@srpo/policy';
import { makeSets } from '@srpo/policy/testing';
import { resolveCorrectionConfig, resolveObjectiveConfig } from '@srpo/srpo';
import { TINY_MODEL } from '@srpo/testing';
import { TfPolicyTrainer, type TrainingSet } from './policy-trainer';

/**
 * The KL penalty to a reference policy through TfPolicyTrainer (docs/objective.md, section 7):
 * for a LoRA policy the reference is the base model without the adapter; full-weight policies
 * have none and are refused.
 */
const LLAMA = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'llama');
const objective = resolveObjectiveConfig({}, 'objective');

async function llamaSets(): Promise<TrainingSet[]> {
  // Behaviour log-probs from the base model: what the LoRA policy computes at version 0 (B = 0).
  const hf = loadHfModel(LLAMA);
  const policy = new Policy('data', hf.model);
  try {
    const sets = await makeSets(policy, 5, 3, { ctx: 4, resp: 3 });
    return sets.map((s) => ({
      setId: s.setId,
      advantage: s.advantage,
      members: s.members.map((m) => ({ ...m, mask: m.logpOld.map(() => 1), temperature: 1 })),
    }));
  } finally {
    policy.dispose();
  }
}

function loraTrainer(): TfPolicyTrainer {
  return new TfPolicyTrainer({
    policyId: 'p',
    model: TINY_MODEL,
    modelDir: LLAMA,
    lora: resolveLoraConfig({ r: 4, alpha: 8 }),
    lr: 0.01,
    epochs: 1,
    maxGradNorm: 0,
  });
}

/** `losses/kl` after each of `steps` updates on the same sets. */
async function klTrace(klCoef: number, sets: TrainingSet[], steps: number): Promise<number[]> {
  const trainer = loraTrainer();
  await trainer.init(3);
  const correction = resolveCorrectionConfig({ klCoef }, 'correction');
  try {
    const out: number[] = [];
    for (let i = 0; i < steps; i++) out.push((await trainer.step(sets, objective, correction)).diagnostics['losses/kl']);
    return out;
  } finally {
    trainer.dispose();
  }
}

describe('TfPolicyTrainer: KL penalty to the LoRA base', () => {
  let sets: TrainingSet[];

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    sets = await llamaSets();
  });

  it('is exactly 0 at version 0 (the adapter adds B = 0), then grows as the adapter trains, and less with a larger β', async () => {
    const weak = await klTrace(1e-6, sets, 6);
    const strong = await klTrace(2, sets, 6);
    expect(weak[0]).toBe(0);
    expect(strong[0]).toBe(0);
    expect(weak[5]).toBeGreaterThan(0);
    // Measured: 0.11 without a real penalty, 0.012 with β = 2 after six steps (lr 0.01).
    expect(strong[5]).toBeLessThan(weak[5] / 3);
  });

  it('adds β·KL to the loss it reports, next to the surrogate', async () => {
    const trainer = loraTrainer();
    await trainer.init(3);
    try {
      const correction = resolveCorrectionConfig({ klCoef: 0.5 }, 'correction');
      await trainer.step(sets, objective, correction);
      const d = (await trainer.step(sets, objective, correction)).diagnostics;
      expect(d['losses/kl']).toBeGreaterThan(0);
      expect(d['losses/loss']).toBeCloseTo(d['losses/surrogate'] + 0.5 * d['losses/kl'], 6);
    } finally {
      trainer.dispose();
    }
  });

  it('is deterministic: two trainers from one seed, the same steps with a correction and a penalty, the same weights', async () => {
    const run = async (): Promise<string> => {
      const trainer = loraTrainer();
      await trainer.init(3);
      try {
        const correction = resolveCorrectionConfig({ correction: 'tis', klCoef: 0.5 }, 'correction');
        for (let i = 0; i < 2; i++) await trainer.step(sets, objective, correction);
        return await trainer.weightsHash();
      } finally {
        trainer.dispose();
      }
    };
    expect(await run()).toBe(await run());
  });

  it('recomputes from a checkpoint as verify does: the reloaded LoRA policy has the same reference, the step the same weights', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-kl-'));
    const correction = resolveCorrectionConfig({ correction: 'tis', klCoef: 0.5 }, 'correction');
    const live = loraTrainer();
    const again = loraTrainer();
    try {
      await live.init(3);
      await live.step(sets, objective, correction);
      await live.save(dir);
      const second = await live.step(sets, objective, correction);
      expect(second.diagnostics['losses/kl']).toBeGreaterThan(0);
      await again.load(dir);
      const recomputed = await again.step(sets, objective, correction);
      expect(recomputed.diagnostics['losses/kl']).toBe(second.diagnostics['losses/kl']);
      expect(await again.weightsHash()).toBe(await live.weightsHash());
    } finally {
      live.dispose();
      again.dispose();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a penalty on a full-weight policy, naming the field', async () => {
    const trainer = new TfPolicyTrainer({ policyId: 'p', model: TINY_MODEL, lr: 0.01, epochs: 1, maxGradNorm: 1 });
    await trainer.init(1);
    try {
      const policy = Policy.create('data', TINY_MODEL, 1);
      const tiny = (await makeSets(policy, 2, 2)).map((s) => ({
        ...s,
        members: s.members.map((m) => ({ ...m, mask: m.logpOld.map(() => 1), temperature: 1 })),
      }));
      policy.dispose();
      const step = trainer.step(tiny, objective, resolveCorrectionConfig({ klCoef: 0.1 }, 'correction'));
      await expect(step).rejects.toThrow(ValidationError);
      await expect(trainer.step(tiny, objective, resolveCorrectionConfig({ klCoef: 0.1 }, 'correction'))).rejects.toThrow(/correction\.klCoef.*LoRA/);
      expect(trainer.version).toBe(0);
    } finally {
      trainer.dispose();
    }
  });
});
