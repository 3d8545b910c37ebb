import * as tf from '@tensorflow/tfjs';
import { geluWithDerivative } from './native-ops';
import { backendLabel, configureSrpoKernels, loadSrpoKernels, srpoKernelAvailable } from './srpo-kernels';
import { nativeBackend } from './test/fixtures';
import { gelu } from './transformer-ops';

/**
 * The fused kernels against float64 evaluations of their formulas (written here, not taken
 * from the code under test), and against the composite paths they replace.
 *
 * `npm run setup` builds the addon; without it these tests skip, unless
 * SRPO_REQUIRE_NATIVE_KERNELS=1 (CI), where its absence fails them.
 */
const required = process.env.SRPO_REQUIRE_NATIVE_KERNELS === '1';

/** tanh-form GELU and its derivative in float64: ½x(1 + tanh u), u = √(2/π)(x + 0.044715x³). */
function gelu64(x: number): { y: number; dydx: number } {
  const c = Math.sqrt(2 / Math.PI);
  const a = 0.044715;
  const t = Math.tanh(c * (x + a * x ** 3));
  return { y: 0.5 * x * (1 + t), dydx: 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x) };
}

describe('srpo-kernels (fused TensorFlow kernels)', () => {
  beforeAll(nativeBackend);

  it('loads on this machine, or says why (required in CI)', () => {
    const s = loadSrpoKernels();
    if (required) expect(s).toMatchObject({ loaded: true });
    if (s.loaded) {
      expect(s.ops).toContain('SrpoGeluWithDerivative');
      expect(s.version).toBeGreaterThanOrEqual(1);
      expect(backendLabel({ name: 'tensorflow' })).toBe(`tensorflow+srpo-kernels.${s.version}`);
    } else {
      expect(s.reason).toEqual(expect.any(String));
      expect(backendLabel({ name: 'tensorflow' })).toBe('tensorflow');
    }
    expect(backendLabel({ name: 'webgpu' })).toBe('webgpu');
  });

  const available = (): boolean => srpoKernelAvailable('SrpoGeluWithDerivative');

  it('GELU and its derivative match float64 within float32 rounding, over the whole range', async () => {
    if (!available()) return void expect(required).toBe(false);
    const grid = Array.from({ length: 4801 }, (_, i) => -12 + i * 0.005);
    const x = tf.tensor2d([...grid, 0, -0, 1e-30, -1e-30], [1, grid.length + 4]);
    const out = geluWithDerivative(x);
    expect(out).toBeDefined();
    const [y, d] = await Promise.all([out!.y.data(), out!.dydx.data()]);
    const xs = await x.data();
    let worstY = 0;
    let worstD = 0;
    xs.forEach((v, i) => {
      const r = gelu64(v);
      worstY = Math.max(worstY, Math.abs(y[i] - r.y) / Math.max(1, Math.abs(r.y)));
      worstD = Math.max(worstD, Math.abs(d[i] - r.dydx));
    });
    // float32 has 6e-8 relative precision; exp and the division each add a few ulps.
    expect(worstY).toBeLessThan(1e-6);
    expect(worstD).toBeLessThan(2e-6);
    expect(out!.y.shape).toEqual(x.shape);
  });

  it('saturates instead of overflowing for large |x|, and keeps NaN', async () => {
    if (!available()) return void expect(required).toBe(false);
    const x = tf.tensor1d([20, -20, 1e13, -1e13, 3e38, -3e38, NaN]);
    const out = geluWithDerivative(x)!;
    // The sign of a zero is not part of the contract (-ffast-math may drop it): compare ±0 as 0.
    const [y, d] = [Array.from(await out.y.data(), (v) => (v === 0 ? 0 : v)), Array.from(await out.dydx.data())];
    expect(y.slice(0, 6)).toEqual([20, 0, 1e13, 0, 3e38, 0].map(Math.fround));
    expect(d.slice(0, 6)).toEqual([1, 0, 1, 0, 1, 0]);
    expect(y[6]).toBeNaN();
    expect(d[6]).toBeNaN();
  });

  it('gives the composite gelu its value and gradient, and can be switched off', async () => {
    if (!available()) return void expect(required).toBe(false);
    const x = tf.randomNormal([64, 48], 0, 3, 'float32', 5) as tf.Tensor2D;
    const upstream = tf.randomUniform([64, 48], -1, 1, 'float32', 6);
    const grad = (composite: boolean) => tf.grad((v: tf.Tensor) => tf.sum(tf.mul(gelu(v as tf.Tensor2D, composite), upstream)));
    const [yf, yc] = await Promise.all([gelu(x).data(), gelu(x, true).data()]);
    const [gf, gc] = await Promise.all([grad(false)(x).data(), grad(true)(x).data()]);
    expect(Math.max(...Array.from(yf, (v, i) => Math.abs(v - yc[i])))).toBeLessThan(2e-6);
    // The composite derivative forms 1 − σ, which cancels to ~1e-5 where σ is near 1; the kernel does not.
    expect(Math.max(...Array.from(gf, (v, i) => Math.abs(v - gc[i])))).toBeLessThan(3e-5);
    try {
      configureSrpoKernels({ enabled: false });
      expect(geluWithDerivative(x)).toBeUndefined();
      expect(backendLabel({ name: 'tensorflow' })).toBe('tensorflow');
    } finally {
      configureSrpoKernels({ enabled: true });
    }
  });

  it('refuses a non-float input with TensorFlow error naming the op', () => {
    if (!available()) return void expect(required).toBe(false);
    const be = tf.backend() as unknown as { executeMultipleOutputs(n: string, a: unknown[], i: tf.Tensor[], k: number): tf.Tensor[] };
    expect(() => be.executeMultipleOutputs('SrpoGeluWithDerivative', [], [tf.tensor1d([1, 2], 'int32')], 2)).toThrow(/SrpoGeluWithDerivative|float/);
  });
});
