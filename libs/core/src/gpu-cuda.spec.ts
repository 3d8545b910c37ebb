import { checkCudaLibraries, cudaMismatchMessage, cudaRequirementFor, CUDA11_TF291, CUDA12_TF_WHEEL, parseLdconfigCache } from './gpu-cuda';
import { initTfBackend } from './tf-backend';
import { ErrorCode, SrpoError } from './errors';

// What listing the lib folders of the CUDA 12 wheels shows (plus the driver).
const CUDA12_LISTING = [
  'libcuda.so.1',
  'libcudart.so.12',
  'libcublas.so.12',
  'libcublasLt.so.12',
  'libnvblas.so.12',
  'libcufft.so.11',
  'libcufftw.so.11',
  'libcusolver.so.11',
  'libcusolverMg.so.11',
  'libcusparse.so.12',
  'libnvJitLink.so.12',
  'libcudnn.so.9',
  'libcudnn_ops.so.9',
];

describe('CUDA library check for tfjs-node-gpu', () => {
  it('passes when every library of the wheel route is present', () => {
    const check = checkCudaLibraries(CUDA12_TF_WHEEL, CUDA12_LISTING);
    expect(check.missing).toEqual([]);
  });

  it('names the missing libraries, the wheels that provide them and what was searched', () => {
    const listing = CUDA12_LISTING.filter((f) => !f.startsWith('libcudnn') && f !== 'libcufft.so.11');
    const check = checkCudaLibraries(CUDA12_TF_WHEEL, listing, ['/opt/venv/nvidia/cublas/lib', 'ldconfig cache']);
    expect(check.missing.map((l) => l.soname)).toEqual(['libcufft.so.11', 'libcudnn.so.9']);
    const msg = cudaMismatchMessage(check);
    expect(msg).toContain('libcufft.so.11');
    expect(msg).toContain('libcudnn.so.9');
    expect(msg).toContain('nvidia-cufft-cu12');
    expect(msg).toContain('nvidia-cudnn-cu12');
    expect(msg).toContain('LD_LIBRARY_PATH');
    expect(msg).toContain('/opt/venv/nvidia/cublas/lib');
    expect(msg).not.toContain('libcudart.so.12');
  });

  it('recognises a CUDA 13 machine: other versions present, the CUDA 12 ones missing', () => {
    const cuda13 = [
      'libcuda.so.1',
      'libcudart.so.13',
      'libcublas.so.13',
      'libcublasLt.so.13',
      'libcufft.so.12',
      'libcusolver.so.12',
      'libcusparse.so.12',
      'libnvJitLink.so.13',
      'libcudnn.so.9',
    ];
    const check = checkCudaLibraries(CUDA12_TF_WHEEL, cuda13);
    expect(check.missing.map((l) => l.soname)).toEqual([
      'libcudart.so.12',
      'libcublas.so.12',
      'libcublasLt.so.12',
      'libcufft.so.11',
      'libcusolver.so.11',
      'libnvJitLink.so.12',
    ]);
    expect(check.otherVersions).toEqual([
      'libcublas.so.13',
      'libcublasLt.so.13',
      'libcudart.so.13',
      'libcufft.so.12',
      'libcusolver.so.12',
      'libnvJitLink.so.13',
    ]);
    expect(cudaMismatchMessage(check)).toMatch(/found other versions: .*libcudart\.so\.13/);
  });

  it('says when the driver itself is missing', () => {
    const check = checkCudaLibraries(
      CUDA12_TF_WHEEL,
      CUDA12_LISTING.filter((f) => f !== 'libcuda.so.1'),
    );
    expect(cudaMismatchMessage(check)).toMatch(/NVIDIA driver \(libcuda\.so\.1 not found\)/);
  });

  it("applies CUDA 11.2 / cuDNN 8 to Google's 2.9.1 archive and CUDA 12 to the wheel layout", () => {
    expect(cudaRequirementFor(undefined)).toBe(CUDA11_TF291);
    expect(cudaRequirementFor(undefined, '12')).toBe(CUDA12_TF_WHEEL);
    const check = checkCudaLibraries(CUDA11_TF291, CUDA12_LISTING);
    expect(check.missing.map((l) => l.soname)).toContain('libcudnn.so.8');
    expect(cudaMismatchMessage(check)).toMatch(/CUDA 11\.2/);
  });

  it('reads the ldconfig cache', () => {
    const out = [
      "1234 libs found in cache `/etc/ld.so.cache'",
      '\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1',
      '\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1',
      '\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1',
    ].join('\n');
    const names = parseLdconfigCache(out);
    expect(names).toContain('libcuda.so.1');
    expect(names).toContain('libz.so.1');
    if (process.arch === 'x64') expect(names.filter((n) => n === 'libcuda.so.1')).toHaveLength(1);
  });

  it('refuses SRPO_BACKEND=tensorflow-gpu with an SrpoError when tfjs-node-gpu is absent, and rejects unknown names', async () => {
    let installed = true;
    try {
      require.resolve('@tensorflow/tfjs-node-gpu');
    } catch {
      installed = false;
    }
    if (!installed) {
      const err = await initTfBackend('tensorflow-gpu').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SrpoError);
      expect((err as SrpoError).code).toBe(ErrorCode.ENVIRONMENT);
      expect((err as SrpoError).message).toMatch(/tensorflow-gpu.*@tensorflow\/tfjs-node-gpu is not installed/);
    }
    await expect(initTfBackend('metal' as never)).rejects.toThrow(/unknown backend 'metal'/);
  });
});
