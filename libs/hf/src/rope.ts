import type { HfModelConfig, RopeScaling } from './hf-config';

const f32 = Math.fround;

/**
 * Rotary inverse frequencies, `[headDim / 2]`, as transformers computes them in float32:
 *
 *   inv_freq_i = 1 / θ^(2i / d)                                  (default)
 *   inv_freq_i / factor                                          (linear: positions / factor)
 *   Llama 3.1 bands, with λ_i = 2π / inv_freq_i, L = original context:
 *     λ_i > L / low_freq_factor   → inv_freq_i / factor
 *     λ_i < L / high_freq_factor  → inv_freq_i
 *     otherwise                   → (1 − s) inv_freq_i / factor + s inv_freq_i,
 *                                   s = (L / λ_i − low) / (high − low)
 *
 * Each step is rounded to float32 as torch does, so the angles below match the reference to
 * the last bit in most positions. Source: transformers `modeling_rope_utils.py`
 * (`_compute_default_rope_parameters`, `_compute_linear_scaling_rope_parameters`,
 * `_compute_llama3_parameters`); Su et al. 2021 (RoFormer) for the embedding itself.
 */
export function ropeInverseFrequencies(headDim: number, theta: number, scaling: RopeScaling): Float32Array {
  const half = headDim / 2;
  const inv = new Float32Array(half);
  for (let i = 0; i < half; i++) inv[i] = f32(1 / f32(Math.pow(f32(theta), f32((2 * i) / headDim))));
  if (scaling.type === 'linear') {
    for (let i = 0; i < half; i++) inv[i] = f32(inv[i] / scaling.factor);
  } else if (scaling.type === 'llama3') {
    const { factor, lowFreqFactor: low, highFreqFactor: high, originalMaxPositionEmbeddings: ctx } = scaling;
    const lowWavelen = ctx / low;
    const highWavelen = ctx / high;
    for (let i = 0; i < half; i++) {
      const wavelen = f32((2 * Math.PI) / inv[i]);
      const scaled = wavelen > lowWavelen ? f32(inv[i] / factor) : inv[i];
      if (wavelen < highWavelen || wavelen > lowWavelen) {
        inv[i] = scaled;
      } else {
        const s = f32(f32(f32(ctx / wavelen) - low) / (high - low));
        inv[i] = f32(f32(f32(f32(1 - s) * scaled) / factor) + f32(s * scaled));
      }
    }
  }
  return inv;
}

/**
 * cos and sin tables `[T, headDim]` for positions 0..T−1, laid out as transformers'
 * `torch.cat((freqs, freqs), -1)` (the "rotate half" convention): column j and j + d/2
 * share frequency j. Angles are float32 products `pos · inv_freq_j`, as in the reference.
 */
export function ropeTables(config: Pick<HfModelConfig, 'headDim' | 'ropeTheta' | 'ropeScaling'>, t: number): { cos: Float32Array; sin: Float32Array } {
  const d = config.headDim;
  const half = d / 2;
  const inv = ropeInverseFrequencies(d, config.ropeTheta, config.ropeScaling);
  const cos = new Float32Array(t * d);
  const sin = new Float32Array(t * d);
  for (let p = 0; p < t; p++) {
    for (let j = 0; j < half; j++) {
      const angle = f32(p * inv[j]);
      const c = f32(Math.cos(angle));
      const s = f32(Math.sin(angle));
      cos[p * d + j] = c;
      cos[p * d + j + half] = c;
      sin[p * d + j] = s;
      sin[p * d + j + half] = s;
    }
  }
  return { cos, sin };
}
