// #21 experiment: checks SrpoMatMul against TensorFlow's MatMul, then times the reference SRPO
// step with TensorFlow's MatMul and with SrpoMatMul in alternating 5-step blocks of one process.
// Run after build.sh, from the repository root, with `npm run build` done:
//   SRPO_BLAS_LIB=.srpo/tf-kernel-addon/blas/scipy_openblas32/lib/libscipy_openblas.so \
//   TF_NUM_INTRAOP_THREADS=2 TF_NUM_INTEROP_THREADS=2 SRPO_BLAS_THREADS=2 node bench/learner/tf-kernel-addon/ab.js
const path = require('node:path');
const root = path.resolve(__dirname, '../../..');
(async () => {
  const core = require(path.join(root, 'dist/libs/core/src/index.js'));
  await core.initTfBackend('tensorflow');
  const tf = require('@tensorflow/tfjs');
  require(path.join(root, '.srpo/tf-kernel-addon/srpo_kernels.node'));
  const be = tf.backend();
  const B = be.binding;
  const bool = (name, value) => ({ name, type: B.TF_ATTR_BOOL, value });
  const a = tf.randomNormal([2048, 128], 0, 1, 'float32', 1);
  const w = tf.randomNormal([128, 512], 0, 1, 'float32', 2);
  for (const [x, y, ta, tb] of [[a, w, false, false], [a, tf.transpose(w), false, true], [a, a, true, false]]) {
    const mine = be.executeSingleOutput('SrpoMatMul', [bool('transpose_a', ta), bool('transpose_b', tb)], [x, y]);
    const ref = be.executeSingleOutput('MatMul', [{ name: 'T', type: B.TF_ATTR_TYPE, value: B.TF_FLOAT }, bool('transpose_a', ta), bool('transpose_b', tb)], [x, y]);
    const d = tf.max(tf.abs(tf.sub(mine, ref))).dataSync()[0];
    console.log(`check ${x.shape}${ta ? 'ᵀ' : ''} · ${y.shape}${tb ? 'ᵀ' : ''}: max |SrpoMatMul − MatMul| = ${d.toExponential(2)}`);
    if (!(d < 1e-2)) throw new Error('SrpoMatMul disagrees with MatMul');
  }
  let useBlas = false;
  const proto = Object.getPrototypeOf(be);
  const orig = proto.executeSingleOutput;
  proto.executeSingleOutput = function (name, attrs, inputs) {
    if (useBlas && name === 'MatMul') return orig.call(this, 'SrpoMatMul', attrs.filter((t) => t.name !== 'T'), inputs);
    return orig.call(this, name, attrs, inputs);
  };
  const { SrpoTrainer } = require(path.join(root, 'dist/libs/policy/src/index.js'));
  const { buildWorkload, WORKLOADS } = require(path.join(root, 'dist/bench/learner/workload.js'));
  const wl = WORKLOADS.reference;
  const { policy, sets } = await buildWorkload(wl);
  const trainer = new SrpoTrainer(policy, { objective: wl.objective, schedule: { kind: 'constant', lr: wl.lr }, maxGradNorm: wl.maxGradNorm });
  for (let i = 0; i < 5; i++) await trainer.update(sets);
  const ms = { tf: [], blas: [] };
  for (let r = 0; r < 12; r++) {
    for (const m of ['tf', 'blas']) {
      useBlas = m === 'blas';
      await trainer.update(sets);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < 5; i++) await trainer.update(sets);
      ms[m].push(Number(process.hrtime.bigint() - t0) / 5e6);
    }
  }
  const med = (v) => [...v].sort((x, y) => x - y)[v.length >> 1];
  const ratios = ms.tf.map((t, i) => ms.blas[i] / t);
  console.log(`ms/step: TensorFlow MatMul median ${med(ms.tf).toFixed(1)}, SrpoMatMul median ${med(ms.blas).toFixed(1)}; SrpoMatMul/MatMul per pair: median ${med(ratios).toFixed(3)} (${ratios.map((x) => x.toFixed(2)).join(' ')})`);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
