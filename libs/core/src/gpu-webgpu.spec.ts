import { describeAdapter, isSoftwareAdapter } from './gpu-webgpu';
import { BACKEND_REQUESTS } from './tf-backend';

describe('WebGPU adapter classification', () => {
  it('treats lavapipe, SwiftShader and fallback adapters as software', () => {
    // What Dawn (webgpu 0.6.2) reports for Mesa 25's lavapipe.
    const lavapipe = {
      vendor: 'mesa',
      architecture: 'software',
      device: 'llvmpipe-llvm-15-0-6-256-bits-',
      description: 'llvmpipe: Mesa 25.0.7 (LLVM 15.0.6)',
      isFallbackAdapter: true,
    };
    expect(isSoftwareAdapter(lavapipe)).toBe(true);
    expect(isSoftwareAdapter({ ...lavapipe, isFallbackAdapter: undefined, architecture: '' })).toBe(true);
    expect(isSoftwareAdapter({ vendor: 'google', description: 'SwiftShader Device (Subzero)' })).toBe(true);
    expect(isSoftwareAdapter({ vendor: 'nvidia', architecture: 'hopper' }, true)).toBe(true);
  });

  it('treats a discrete GPU as hardware and describes it in one line', () => {
    const h200 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H200', description: 'NVIDIA: 580.159.04' };
    expect(isSoftwareAdapter(h200)).toBe(false);
    expect(describeAdapter({ ...h200, software: false, features: [] })).toBe('nvidia hopper (NVIDIA H200, NVIDIA: 580.159.04)');
  });

  it('offers webgpu through SRPO_BACKEND', () => {
    expect([...BACKEND_REQUESTS].sort()).toEqual(['auto', 'cpu', 'tensorflow', 'tensorflow-gpu', 'webgpu']);
  });
});
