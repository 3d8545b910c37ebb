import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { ProbeResult } from './test/backend-probe';
import { compareProbes } from './test/probe-compare';

/**
 * The policy library on WebGPU (tfjs-backend-webgpu on Dawn) against native
 * TensorFlow on the CPU: forward, backward, sampling and SRPO steps on the same
 * batch must agree to float32 rounding.
 *
 * Each backend runs in a child process (test/backend-probe.ts): one process
 * holds one tfjs backend cleanly, and Dawn's threads stay out of jest's worker.
 * Without a GPU, Dawn runs on lavapipe (infra/webgpu/install.sh); about 10 s.
 *
 * Skipped while the WebGPU npm packages are not installed, unless
 * SRPO_REQUIRE_WEBGPU=1 (then their absence fails the run), and on machines
 * marked SRPO_SKIP_WEBGPU=1 (no Vulkan possible; infra/webgpu/install.sh
 * honours it too). Installed packages without a Vulkan driver fail it.
 */
const run = promisify(execFile);
const runner = path.join(__dirname, 'test', 'run-ts.js');
const probe = path.join(__dirname, 'test', 'backend-probe.ts');

function installed(pkg: string): boolean {
  try {
    require.resolve(`${pkg}/package.json`);
    return true;
  } catch {
    return false;
  }
}

const available = installed('webgpu') && installed('@tensorflow/tfjs-backend-webgpu');
const describeWebGpu = process.env.SRPO_SKIP_WEBGPU !== '1' && (available || process.env.SRPO_REQUIRE_WEBGPU === '1') ? describe : describe.skip;

async function probeOn(backend: string, setsFile?: string): Promise<ProbeResult> {
  const args = [runner, probe, backend, ...(setsFile ? [setsFile] : [])];
  try {
    const { stdout } = await run(process.execPath, args, { maxBuffer: 64 << 20, timeout: 110_000, env: { ...process.env, TF_CPP_MIN_LOG_LEVEL: '2' } });
    const line = stdout
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .pop();
    if (!line) throw new Error(`no result from the ${backend} probe:\n${stdout}`);
    return JSON.parse(line) as ProbeResult;
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(
      `${backend} probe failed: ${err.message}\n${(err.stderr ?? '')
        .split('\n')
        .filter((l) => !/artificially reduced/.test(l))
        .slice(-20)
        .join('\n')}`,
    );
  }
}

describeWebGpu('policy on WebGPU vs native TensorFlow (CPU)', () => {
  let cpu: ProbeResult;
  let gpu: ProbeResult;
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'srpo-webgpu-'));
    cpu = await probeOn('tensorflow');
    const setsFile = path.join(dir, 'sets.json');
    writeFileSync(setsFile, JSON.stringify(cpu.sets));
    gpu = await probeOn('webgpu', setsFile);
  }, 240_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('runs on the webgpu backend, with the native-only kernels off there', () => {
    expect(cpu.backend).toBe('tensorflow');
    expect(cpu.nativeKernels).toBe(true);
    expect(gpu.backend).toBe('webgpu');
    expect(gpu.adapter).toBeTruthy();
    expect(gpu.nativeKernels).toBe(false);
  });

  it('agrees with native TensorFlow to float32 rounding: logits, gradients, scoring, sampling, SRPO steps; no leaks; deterministic', () => {
    const failed = compareProbes(cpu, gpu).filter((c) => !c.ok);
    expect(failed.map((c) => `${c.name}: ${c.value} (limit ${c.limit})`)).toEqual([]);
    // The reference itself must hold the bar it sets.
    expect(cpu.tensorsLeaked).toBe(0);
    expect(cpu.deterministic).toBe(true);
  });
});
