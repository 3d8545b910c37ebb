import { spawnSync } from 'node:child_process';

/**
 * What decides each learner side's arithmetic on this CPU, so that a figure can say which
 * kernels produced it (#21): the vector ISA the libraries may use, oneDNN's matmul
 * implementation inside libtensorflow, and the thread settings.
 *
 * `--isa avx2` caps the runtime-dispatched libraries of both sides at AVX2 on an AVX-512
 * machine: oneDNN (libtensorflow's MatMul, `ONEDNN_MAX_CPU_ISA`), and PyTorch's ATen
 * (`ATEN_CPU_CAPABILITY`), MKL (`MKL_ENABLE_INSTRUCTIONS`) and oneDNN. libtensorflow's Eigen
 * kernels (elementwise ops, reductions) have no runtime dispatch: they run the AVX code
 * compiled into the library on every CPU. So the cap reproduces an AVX2 machine's instruction
 * selection, not its caches, memory or clock; figures taken with it are labelled as such.
 */
export type IsaCap = 'native' | 'avx2';

export const ISA_CAPS: readonly IsaCap[] = ['native', 'avx2'];

/** Environment variables that cap both sides' dispatched kernels at `isa` (empty for `native`). */
export function isaEnv(isa: IsaCap): Record<string, string> {
  if (isa === 'native') return {};
  return { ONEDNN_MAX_CPU_ISA: 'AVX2', ATEN_CPU_CAPABILITY: 'avx2', MKL_ENABLE_INSTRUCTIONS: 'AVX2' };
}

export interface OneDnnReport {
  /** False when no oneDNN primitive ran (`TF_ENABLE_ONEDNN_OPTS=0`: Eigen's contraction instead). */
  enabled: boolean;
  version?: string;
  /** The ISA oneDNN detected or was capped at, as its verbose log words it. */
  isa?: string;
  /**
   * The primitives executed, as `kind implementation`: e.g. `matmul brg_matmul:avx512_core`, or
   * `gemm_api` (oneDNN's sgemm entry point, which TensorFlow's 2-D MatMul calls; it logs no
   * implementation).
   */
  primitives: string[];
}

/**
 * Reads oneDNN's verbose log (`ONEDNN_VERBOSE=1`, one CSV line per event):
 * `onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)`, `onednn_verbose,v1,info,cpu,isa:Intel AVX2`,
 * `onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx2,undef,...`.
 */
export function parseOneDnnVerbose(log: string): OneDnnReport {
  const lines = log.split('\n').filter((l) => l.startsWith('onednn_verbose,') || l.startsWith('dnnl_verbose,'));
  const report: OneDnnReport = { enabled: false, primitives: [] };
  for (const line of lines) {
    const f = line.split(',');
    // v1 lines carry a version field after the prefix and a `primitive` category; 2.x lines have neither.
    const tail = f[1] === 'v1' ? f.slice(2) : f.slice(1);
    const rest = tail[0] === 'exec' ? ['primitive', ...tail] : tail;
    if (rest[0] === 'info' && /^oneDNN v/.test(rest[1] ?? '')) report.version = (rest[1] ?? '').replace(/^oneDNN /, '').replace(/ \(.*\)$/, '');
    else if (rest[0] === 'info' && rest[1] === 'cpu' && (rest[2] ?? '').startsWith('isa:')) report.isa = rest.slice(2).join(',').slice(4);
    else if (rest[0] === 'primitive' && rest[1] === 'exec') {
      report.enabled = true;
      const p = `${rest[3] ?? '?'}${rest[4] ? ` ${rest[4]}` : ''}`;
      if (!report.primitives.includes(p)) report.primitives.push(p);
    }
  }
  return report;
}

/** `op` (a TensorFlow op name) and what oneDNN ran for it. */
export function describeOneDnn(op: string, r: OneDnnReport): string {
  if (!r.enabled) return `${op} through Eigen (no oneDNN primitive ran)`;
  return `${op} through oneDNN ${r.version ?? ''} ${r.primitives.join(' + ')}`.replace(/\s+/g, ' ').trim();
}

/** The thread settings both sides run with, as one line. */
export function describeThreads(env: NodeJS.ProcessEnv): string {
  const keys = ['TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'TF_ENABLE_ONEDNN_OPTS'];
  return keys.map((k) => `${k}=${env[k] ?? 'unset'}`).join(' ');
}

/** Probe: one [2048,128]·[128,128] product with `op` through the backend, as the learner calls it. */
export async function matMulProbe(op: 'MatMul' | 'BatchMatMulV2'): Promise<void> {
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const tf = await import('@tensorflow/tfjs');
  const be = tf.backend() as unknown as { binding: Record<string, number>; executeSingleOutput(n: string, a: unknown[], i: unknown[]): { dispose(): void } };
  const b = be.binding;
  const x = tf.ones([2048, 128]);
  const w = tf.ones([128, 128]);
  const [ta, tb] = op === 'MatMul' ? ['transpose_a', 'transpose_b'] : ['adj_x', 'adj_y'];
  const attrs = [
    { name: 'T', type: b.TF_ATTR_TYPE, value: b.TF_FLOAT },
    { name: ta, type: b.TF_ATTR_BOOL, value: false },
    { name: tb, type: b.TF_ATTR_BOOL, value: false },
  ];
  be.executeSingleOutput(op, attrs, [x, w]).dispose();
}

/**
 * Which product kernels libtensorflow runs here, from probe processes (`node ...nodeArgs --probe OP`,
 * which runs {@link matMulProbe}) under ONEDNN_VERBOSE: the
 * 2-D `MatMul` the project's native fast paths call, and the `BatchMatMulV2` of attention and tfjs's matMul.
 * `matMulUnused`: the 2-D products ran the project's `SrpoMatMul`, so `MatMul` is not probed.
 */
export function probeTfKernels(nodeArgs: readonly string[], env: NodeJS.ProcessEnv, matMulUnused = false): string {
  const parts: string[] = matMulUnused ? ["TensorFlow's MatMul not run (the 2-D products run SrpoMatMul)"] : [];
  let isa: string | undefined;
  for (const op of matMulUnused ? (['BatchMatMulV2'] as const) : (['MatMul', 'BatchMatMulV2'] as const)) {
    const r = spawnSync(process.execPath, [...nodeArgs, '--probe', op], { env: { ...env, ONEDNN_VERBOSE: '1' }, encoding: 'utf8', maxBuffer: 16 << 20 });
    if (r.status !== 0) {
      parts.push(`${op} unknown (probe failed: ${(r.stderr ?? '').trim().split('\n').pop() ?? r.status})`);
      continue;
    }
    const report = parseOneDnnVerbose(r.stdout);
    isa ??= report.isa;
    parts.push(describeOneDnn(op, report));
  }
  return `${parts.join('; ')}${isa ? ` (oneDNN isa: ${isa})` : ''}; elementwise ops and reductions through Eigen (AVX code compiled into libtensorflow, no runtime dispatch)`;
}
