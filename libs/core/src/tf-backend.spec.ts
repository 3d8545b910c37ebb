import { EnvReader } from './config';
import { SrpoError } from './errors';
import { initTfBackend, tf, tfBackendSettings } from './tf-backend';

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

describe('tfBackendSettings (what an app config reads for the backend)', () => {
  const read = (env: Record<string, string>) => tfBackendSettings(new EnvReader(env));

  it('is empty when nothing is set, and takes each variable as given', () => {
    expect(read({})).toEqual({});
    expect(
      read({
        SRPO_WEBGPU_FLAGS: '{"WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE": 8, "WEBGPU_USE_PROFILE_TOOL": false}',
        SRPO_DAWN_NODE: '/opt/b/dawn.node',
        SRPO_TF_CUDA: '12',
        LD_LIBRARY_PATH: '/a:/b',
      }),
    ).toEqual({
      webgpuFlags: { WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE: 8, WEBGPU_USE_PROFILE_TOOL: false },
      dawnNode: '/opt/b/dawn.node',
      tfCuda: '12',
      libraryPath: '/a:/b',
    });
  });

  it.each([
    [{ SRPO_WEBGPU_FLAGS: '{not json' }, 'SRPO_WEBGPU_FLAGS', /is not valid JSON \(/],
    [{ SRPO_WEBGPU_FLAGS: '[1, 2]' }, 'SRPO_WEBGPU_FLAGS', /expected a JSON object of tfjs flags$/],
    [{ SRPO_WEBGPU_FLAGS: '{"A": {"b": 1}}' }, 'SRPO_WEBGPU_FLAGS', /flag A: expected a number, boolean or string/],
    [{ SRPO_TF_CUDA: '13' }, 'SRPO_TF_CUDA', /expected one of 11, 12, got "13"/],
  ])('refuses %j, naming %s', (env, field, message) => {
    let caught: unknown;
    try {
      read(env);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(SrpoError);
    expect((caught as SrpoError).message).toMatch(message);
    expect((caught as SrpoError).message).toContain(`invalid configuration ${field}`);
  });
});
