import * as fs from 'fs';
import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { repoRoot } from '@srpo/core';
import { buildPaddedSetBatch, disposePaddedSetBatch, objectiveLoss, resolveObjectiveConfig, type SetInput } from '@srpo/srpo';
import { disposePacked, packedLogProbs, packedToTensors, packPairs } from '@srpo/policy';
import { configureSrpoKernels, srpoKernelAvailable } from '@srpo/kernels';
import { describeNative, nativeBackend } from '@srpo/kernels/testing';
import { loadHfModel } from './hf-model-dir';
import { readSafetensorsHeader, readSafetensorsTensor } from './safetensors';

/**
 * One SRPO loss and its gradient on the tiny HF fixtures, against PyTorch autograd
 * (scripts/reference/make_hf_grad_fixture.py: the same sets, logpOld and objective).
 */
const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');

interface GradCase {
  objective: { objective: 'srpo'; eventReduction: 'sqrt'; clipLow: number; clipHigh: number };
  sets: { setId: string; advantage: number; members: { outputId: string; contextTokens: number[]; responseTokens: number[]; logpOld: number[] }[] }[];
  loss: number;
}

// Both paths of llama-ops: the project's fused kernels (where built; CI requires them) and the
// composite tfjs ops that WebGPU and machines without the kernels run.
const modes = [
  ['fused kernels', true],
  ['composite ops', false],
] as const;

// The fused cases are chosen as the file loads (describeNative): without the addon they are reported
// skipped (not passed on the composite path), unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI), where they run and fail.
for (const [name, mode, fused] of modes.flatMap(([mode, fused]) => ['llama', 'qwen2'].map((name) => [name, mode, fused] as const))) {
  const describeMode = fused ? (title: string, fn: () => void) => describeNative(['SrpoRmsNorm'], title, fn) : describe;
  describeMode(`${name} (${mode}): SRPO gradients against PyTorch autograd`, () => {
    const dir = path.join(FIXTURES, name);
    afterEach(() => configureSrpoKernels({ enabled: true }));

    it('loss within 1e-5; every weight gradient within float32 tolerance of torch', async () => {
      await nativeBackend();
      configureSrpoKernels({ enabled: fused });
      if (fused) expect(srpoKernelAvailable('SrpoRmsNorm')).toBe(true);
      if (!fused) expect(srpoKernelAvailable('SrpoRmsNorm')).toBe(false);
      const ref = JSON.parse(fs.readFileSync(path.join(dir, 'grad-case.json'), 'utf8')) as GradCase;
      const grads = readSafetensorsHeader(path.join(dir, 'grad-reference.safetensors'));
      const hf = loadHfModel(dir);
      try {
        const members = ref.sets.flatMap((s) => s.members);
        const packed = packPairs(
          members.map((m) => ({ contextTokens: m.contextTokens, responseTokens: m.responseTokens })),
          hf.model,
        );
        const inputs: SetInput[] = ref.sets.map((s) => ({
          setId: s.setId,
          advantage: s.advantage,
          members: s.members.map((m) => ({ outputId: m.outputId, logpOld: m.logpOld, mask: m.responseTokens.map(() => 1) })),
        }));
        const batch = buildPaddedSetBatch(inputs);
        const tensors = packedToTensors(packed);
        const config = resolveObjectiveConfig(ref.objective);
        const vars = hf.model.trainableVariables();
        const names = hf.model.weightNames();
        let loss = NaN;
        const { grads: g, value } = tf.variableGrads(() => objectiveLoss(packedLogProbs(hf.model, tensors, 1), batch, config).loss, vars);
        loss = (await value.data())[0];
        expect(Math.abs(loss - ref.loss)).toBeLessThan(1e-5);
        // Tied models: torch reports the shared matrix once, under the embedding's name; so do we.
        expect(names.slice().sort()).toEqual([...grads.tensors.keys()].sort());
        let worst = 0;
        for (let i = 0; i < names.length; i++) {
          const got = (await g[vars[i].name].data()) as Float32Array;
          const want = readSafetensorsTensor(grads, names[i]);
          expect(got.length).toBe(want.length);
          let scale = 0;
          let diff = 0;
          for (let j = 0; j < want.length; j++) {
            scale = Math.max(scale, Math.abs(want[j]));
            diff = Math.max(diff, Math.abs(got[j] - want[j]));
          }
          // Relative to the tensor's largest entry: float32 sums in another order differ by ~1e-6 of it.
          const rel = diff / Math.max(scale, 1e-12);
          worst = Math.max(worst, rel);
          expect({ name: names[i], rel: rel < 1e-4, nonzero: scale > 0 }).toEqual({ name: names[i], rel: true, nonzero: true });
        }
        tf.dispose([value, ...Object.values(g)]);
        disposePacked(tensors);
        disposePaddedSetBatch(batch);
        expect(worst).toBeLessThan(1e-4);
      } finally {
        hf.model.dispose();
      }
    });
  });
}
