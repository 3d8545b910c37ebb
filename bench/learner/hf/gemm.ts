/**
 * Where the HF learner's gap to PyTorch sits: the same float32 GEMMs in libtensorflow (through
 * tfjs-node's matMul, i.e. BatchMatMulV2) and in PyTorch, alternating, on 2 threads. The shapes
 * are the HF bench's MLP projection (B·T = 2048 rows, hidden 512, SwiGLU 1408) and its two
 * backward products. Not a timed test.
 *
 *   npm run build:bench && node dist-bench/bench/learner/hf/gemm.js [--rounds 3]
 */
import { spawnSync } from 'node:child_process';
import * as os from 'node:os';
import * as tf from '@tensorflow/tfjs-node';
import { cpuDescription } from '../../cpu';
import { findBenchScript, threadEnv } from '../bench-common';

const M = 2048;
const K = 512;
const N = 1408;
const ITERS = 50;

function time(f: () => tf.Tensor): number {
  for (let i = 0; i < 5; i++) tf.tidy(f).dataSync();
  const t0 = process.hrtime.bigint();
  let last: tf.Tensor | undefined;
  for (let i = 0; i < ITERS; i++) {
    last?.dispose();
    last = tf.tidy(f);
  }
  last?.dataSync();
  last?.dispose();
  return Number(process.hrtime.bigint() - t0) / 1e6 / ITERS;
}

const gflops = (ms: number) => (2 * M * K * N) / (ms * 1e6);

function main(): void {
  const i = process.argv.indexOf('--rounds');
  const rounds = i >= 0 ? Number(process.argv[i + 1]) : 3;
  const cpu = cpuDescription();
  console.log(`CPU: ${cpu.model}, ${cpu.vector}, ${os.cpus().length} vCPUs; TF_NUM_INTRAOP_THREADS=${process.env.TF_NUM_INTRAOP_THREADS ?? 'default'}`);
  const x = tf.randomNormal([M, K]);
  const w = tf.randomNormal([N, K]);
  const dy = tf.randomNormal([M, N]);
  const script = findBenchScript(__dirname, 'hf/gemm_torch.py', 1);
  console.log('| round | product | tfjs GFLOP/s | PyTorch GFLOP/s | ratio |');
  console.log('| ---: | --- | ---: | ---: | ---: |');
  for (let r = 1; r <= rounds; r++) {
    const ours = [time(() => tf.matMul(x, w, false, true)), time(() => tf.matMul(dy, x, true, false)), time(() => tf.matMul(dy, w))];
    const out = script ? spawnSync('python3', [script], { encoding: 'utf8', env: threadEnv(2) }) : undefined;
    const theirs = (out?.stdout ?? '')
      .split('\n')
      .filter((l) => l.includes('GFLOP/s'))
      .map((l) => Number(/([\d.]+) GFLOP\/s/.exec(l)?.[1]));
    ['x·Wᵀ (forward)', 'dYᵀ·x (dW)', 'dY·W (dX)'].forEach((name, j) => {
      const t = theirs[j];
      console.log(`| ${r} | ${name} | ${gflops(ours[j]).toFixed(0)} | ${t ? t.toFixed(0) : '-'} | ${t ? (gflops(ours[j]) / t).toFixed(2) : '-'} |`);
    });
  }
}

main();
