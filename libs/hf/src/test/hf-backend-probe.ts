/**
 * Child process for hf-webgpu.spec.ts: on one tfjs backend, scores every HF fixture's
 * reference cases and computes the SRPO gradient of grad-case.json, and prints how far
 * both are from the transformers / torch references as one JSON line.
 *
 *   node libs/policy/src/test/run-ts.js libs/hf/src/test/hf-backend-probe.ts <backend>
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { EnvReader, initTfBackend, releaseTfBackend, tfBackendSettings, repoRoot, type BackendRequest } from '@srpo/core';
import { buildPaddedSetBatch, disposePaddedSetBatch, objectiveLoss, resolveObjectiveConfig } from '@srpo/srpo';
import { disposePacked, packedLogProbs, packedToTensors, packPairs } from '@srpo/policy';
import { loadHfModel } from '../hf-model-dir';
import { readSafetensorsHeader, readSafetensorsTensor } from '../safetensors';
import { scoreCases, type ScoredCase } from '../score';

/** What the probe reads of a fixture's grad-case.json (written by the Python reference). */
interface GradCase {
  sets: {
    setId: string;
    advantage: number;
    members: { outputId: string; contextTokens: number[]; responseTokens: number[]; logpOld: number[] }[];
  }[];
  objective: unknown;
  loss: number;
}

export interface HfProbeResult {
  backend: string;
  /** Per fixture: the largest per-token |ours − transformers| over all reference cases. */
  logprobDiff: Record<string, number>;
  /** Per fixture with a gradient case: |loss − torch| and the worst per-tensor max|Δ| / max|g|. */
  lossDiff: Record<string, number>;
  gradRelDiff: Record<string, number>;
}

async function main(): Promise<void> {
  const backend = process.argv[2] as BackendRequest;
  const info = await initTfBackend(backend, tfBackendSettings(new EnvReader(process.env))); // SRPO_DAWN_NODE in the GPU bundle
  const fixtures = path.join(repoRoot(), 'libs', 'hf', 'fixtures');
  const out: HfProbeResult = { backend: info.name, logprobDiff: {}, lossDiff: {}, gradRelDiff: {} };
  for (const name of fs.readdirSync(fixtures).sort()) {
    const dir = path.join(fixtures, name);
    const ref = JSON.parse(fs.readFileSync(path.join(dir, 'reference.json'), 'utf8')) as Record<'cases' | 'chatCases' | 'idCases', ScoredCase[]>;
    const hf = loadHfModel(dir);
    const want = [...ref.cases, ...ref.chatCases, ...ref.idCases];
    const got = await scoreCases(hf.model, want);
    out.logprobDiff[name] = Math.max(...got.flatMap((g, i) => g.logprobs.map((v, j) => Math.abs(v - want[i].logprobs[j]))));
    const gradCase = path.join(dir, 'grad-case.json');
    if (fs.existsSync(gradCase)) {
      const c = JSON.parse(fs.readFileSync(gradCase, 'utf8')) as GradCase;
      const members = c.sets.flatMap((s) => s.members);
      const packed = packPairs(
        members.map((m) => ({ contextTokens: m.contextTokens, responseTokens: m.responseTokens })),
        hf.model,
      );
      const batch = buildPaddedSetBatch(
        c.sets.map((s) => ({
          setId: s.setId,
          advantage: s.advantage,
          members: s.members.map((m) => ({ outputId: m.outputId, logpOld: m.logpOld, mask: m.responseTokens.map(() => 1) })),
        })),
      );
      const tensors = packedToTensors(packed);
      const vars = hf.model.trainableVariables();
      const names = hf.model.weightNames();
      const { value, grads } = tf.variableGrads(
        () => objectiveLoss(packedLogProbs(hf.model, tensors, 1), batch, resolveObjectiveConfig(c.objective)).loss,
        vars,
      );
      out.lossDiff[name] = Math.abs((await value.data())[0] - c.loss);
      const refGrads = readSafetensorsHeader(path.join(dir, 'grad-reference.safetensors'));
      let worst = 0;
      for (let i = 0; i < names.length; i++) {
        const g = (await grads[vars[i].name].data()) as Float32Array;
        const w = readSafetensorsTensor(refGrads, names[i]);
        let scale = 0;
        let diff = 0;
        for (let j = 0; j < w.length; j++) {
          scale = Math.max(scale, Math.abs(w[j]));
          diff = Math.max(diff, Math.abs(g[j] - w[j]));
        }
        worst = Math.max(worst, diff / Math.max(scale, 1e-12));
      }
      out.gradRelDiff[name] = worst;
      tf.dispose([value, ...Object.values(grads)]);
      disposePacked(tensors);
      disposePaddedSetBatch(batch);
    }
    hf.model.dispose();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  releaseTfBackend();
}

main().catch((e) => {
  process.stderr.write(`${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
