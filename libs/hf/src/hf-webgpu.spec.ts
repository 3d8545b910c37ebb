import { execFile } from 'node:child_process';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { HfProbeResult } from './test/hf-backend-probe';

/**
 * The Hugging Face port on each backend against the transformers / torch references
 * (not against another backend): per-token log-probs of every fixture within 1e-4, the
 * SRPO loss within 1e-5 and its gradients within 1e-4 of torch's largest entry per tensor.
 * Each backend runs in its own process (one tfjs backend per process; Dawn's threads stay
 * out of jest). WebGPU is gated like webgpu.spec.ts: skipped without its packages unless
 * SRPO_REQUIRE_WEBGPU=1, and on machines marked SRPO_SKIP_WEBGPU=1.
 */
const run = promisify(execFile);
// The TypeScript runner of @srpo/policy's backend probes: one runner for every library.
const runner = path.join(__dirname, '..', '..', 'policy', 'src', 'test', 'run-ts.js');
const probe = path.join(__dirname, 'test', 'hf-backend-probe.ts');

function installed(pkg: string): boolean {
  try {
    require.resolve(`${pkg}/package.json`);
    return true;
  } catch {
    return false;
  }
}

const webgpu =
  process.env.SRPO_SKIP_WEBGPU !== '1' && ((installed('webgpu') && installed('@tensorflow/tfjs-backend-webgpu')) || process.env.SRPO_REQUIRE_WEBGPU === '1');
const backends = ['tensorflow', ...(webgpu ? ['webgpu'] : [])];

describe.each(backends)('HF models on %s against transformers', (backend) => {
  let result: HfProbeResult;

  beforeAll(async () => {
    const { stdout } = await run(process.execPath, [runner, probe, backend], {
      maxBuffer: 16 << 20,
      timeout: 110_000,
      env: { ...process.env, TF_CPP_MIN_LOG_LEVEL: '2' },
    });
    const line = stdout
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{"backend"'))
      .pop();
    if (!line) throw new Error(`no result from the ${backend} probe:\n${stdout}`);
    result = JSON.parse(line) as HfProbeResult;
  }, 120_000);

  it('runs on the requested backend', () => {
    expect(result.backend).toBe(backend);
  });

  it('log-probs of every fixture within 1e-4 per token', () => {
    expect(Object.keys(result.logprobDiff).sort()).toEqual(['llama', 'mistral', 'qwen2']);
    for (const [name, d] of Object.entries(result.logprobDiff)) expect({ name, ok: d < 1e-4 }).toEqual({ name, ok: true });
  });

  it('SRPO loss within 1e-5 and gradients within 1e-4 (relative to the tensor) of torch autograd', () => {
    expect(Object.keys(result.gradRelDiff).sort()).toEqual(['llama', 'qwen2']);
    for (const [name, d] of Object.entries(result.lossDiff)) expect({ name, ok: d < 1e-5 }).toEqual({ name, ok: true });
    for (const [name, d] of Object.entries(result.gradRelDiff)) expect({ name, ok: d < 1e-4 }).toEqual({ name, ok: true });
  });
});
