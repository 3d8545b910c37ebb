import { initTfBackend, tf } from './tf-backend';

describe('initTfBackend', () => {
  it('picks native TensorFlow (tfjs-node) by default on this machine', async () => {
    const info = await initTfBackend('auto');
    expect(info.name).toBe('tensorflow');
    expect(info.package).toBe('@tensorflow/tfjs-node');
    expect(info.nativeVersion).toMatch(/^2\.\d+\.\d+/);
    expect(tf().getBackend()).toBe('tensorflow');
    const product = tf().matMul(tf().tensor2d([[1, 2]]), tf().tensor2d([[3], [4]]));
    expect(Array.from(await product.data())).toEqual([11]);
  });
});
