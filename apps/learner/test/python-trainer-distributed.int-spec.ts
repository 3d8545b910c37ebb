import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { initTfBackend, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, toPlain, type AdvantageGroup, type SetMember } from '@srpo/events';
import { sampleBatch } from '@srpo/policy';
import { loadHfModel } from '@srpo/hf';
import { activeSet, advantageGroup, ensureKafka, member, produceGroups, tempDir, uniquePrefix } from '@srpo/testing';

/**
 * examples/python-trainer on torch.distributed (issue #43): `torchrun --nproc_per_node 2 ... --backend gloo`
 * on the CPU against the same trainer in one process, on the same groups from the real broker.
 *
 * Three mini-batches of SETS_PER_UPDATE = 4: five sets (split 3 / 2 between the ranks; one member with a
 * context longer than the model's 256 positions, micro-batches of at most 600 positions, so the ranks
 * run different numbers of micro-batches), four sets, and one set left after triage (the other group
 * has a member at a future version: rank 1 trains no set and only joins the all-reduce).
 *
 * The distributed run is killed mid-update: rank 1 dies (SIGKILL) in update 2, its shard
 * backpropagated, the gradients not yet all-reduced. Then it restarts. The records hold update 1 once
 * and nothing of update 2 after the kill, updates 1-3 once each after the restart; the published
 * versions are 1, 2, 3 once each. Against the one-process run: the same update ids and ledger rows;
 * update 1 (the same weights on both sides) has the loss within 1e-5 and the gradient norm within 1e-5
 * relative, updates 2 and 3 within 1e-5 and 1e-4; the weights of every version (the checkpoints'
 * safetensors) differ from the one-process ones by at most 1e-3 of how far they moved (L2), on at most
 * 0.1 % of the entries by more than 1e-6, and nowhere by a fifth of an Adam step (bit-exact they are not:
 * see the comment at the comparison). At the end both ranks log the recorded weights hash.
 */
const root = repoRoot();
const BASE = path.join(root, 'libs', 'hf', 'fixtures', 'qwen2');
const DIR = path.join(root, 'examples', 'python-trainer');
const SCRIPT = path.join(DIR, 'srpo_trainer.py');
const INSTALL = 'python3 -m pip install -r examples/python-trainer/requirements.txt';
const TEMPERATURE = 0.8;

interface SetSpec {
  k: number;
  advantage: number;
  shift: number;
  /** The version a member was sampled at (a future one makes its group `future-version`). */
  version?: number;
}
const GROUPS: SetSpec[][] = [
  // update 1: 5 sets
  [
    { k: 2, advantage: 1, shift: 0.04 },
    { k: 1, advantage: -1, shift: -0.05 },
  ],
  [
    { k: 1, advantage: 0.7, shift: -0.06 }, // past the high clip
    { k: 2, advantage: -0.7, shift: 0.03 }, // a 300-token context (left-truncated) and a masked token
    { k: 1, advantage: 0.3, shift: 0.01 },
  ],
  // update 2: 4 sets
  [
    { k: 1, advantage: 0.5, shift: 0.02 },
    { k: 1, advantage: -0.5, shift: -0.02 },
  ],
  [
    { k: 2, advantage: -1.2, shift: 0.03 },
    { k: 1, advantage: 1.2, shift: 0 },
  ],
  // update 3: one set trained, the next group skipped (future-version)
  [{ k: 2, advantage: 0.9, shift: -0.03 }],
  [
    { k: 1, advantage: 1, shift: 0 },
    { k: 1, advantage: 0, shift: 0, version: 99 },
    { k: 1, advantage: -1, shift: 0 },
  ],
];

interface Update {
  kind: 'update';
  updateId: string;
  versionBefore: number;
  versionAfter: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
  loss: number;
  gradNorm: number;
  checkpointUri: string;
  backend: string;
  diagnostics: Record<string, number>;
  groups: { groupId: string; source: object; setIds: string[]; advantages: number[]; sources: object[] }[];
}
type RecordLine = Update | { kind: 'skip'; groupId: string; reason: string };

function run(cmd: string, args: string[], extraEnv: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(cmd, args, {
    encoding: 'utf8',
    timeout: 180_000,
    env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1', OMP_NUM_THREADS: '1', ...extraEnv },
  });
  return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

function ok(r: { status: number | null; stderr: string }, what: string): void {
  if (r.status !== 0) throw new Error(`${what} failed (${r.status}):\n${r.stderr.slice(-4000)}\n(requirements: ${INSTALL})`);
}

function readRecords(file: string): { lines: RecordLine[]; text: string } {
  const text = fs.readFileSync(file, 'utf8');
  return {
    text,
    lines: text
      .split('\n')
      .filter((l) => l)
      .map((l) => JSON.parse(l) as RecordLine),
  };
}

/** A safetensors file's float32 (or bfloat16) tensors as float32, by name (8-byte little-endian header length, the JSON header, the data). */
function safetensors(file: string): Map<string, Float32Array> {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; data_offsets: [number, number] }>;
  const out = new Map<string, Float32Array>();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [b, e] = t.data_offsets;
    const bytes = buf.subarray(8 + n + b, 8 + n + e);
    if (t.dtype === 'F32') out.set(name, new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)));
    else if (t.dtype === 'BF16') {
      // bfloat16 is the top half of a float32 (the base fixture is stored so; the trainer loads it as float32)
      const bits = new Uint32Array(bytes.length / 2);
      for (let i = 0; i < bits.length; i++) bits[i] = bytes.readUInt16LE(2 * i) << 16;
      out.set(name, new Float32Array(bits.buffer));
    } else throw new Error(`${name}: ${t.dtype}, expected F32 or BF16`);
  }
  return out;
}

describe('examples/python-trainer under torchrun (2 ranks, gloo) against the same trainer in one process', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'python-trainer-dist-test' });

  beforeAll(() => {
    const r = spawnSync('python3', ['-c', 'import torch, torch.distributed as d, transformers, fastavro, confluent_kafka; assert d.is_gloo_available()'], {
      encoding: 'utf8',
    });
    if (r.status !== 0)
      throw new Error(`the Python trainer's packages are missing (${(r.stderr || '').trim().split('\n').pop()}); install them with: ${INSTALL}`);
    if (spawnSync('torchrun', ['--help'], { encoding: 'utf8' }).status !== 0) throw new Error(`torchrun is not on PATH (it comes with torch: ${INSTALL})`);
  });

  it('splits each mini-batch over the ranks with the one-process loss and weights, and applies an update once when a rank dies mid-update', async () => {
    // Groups whose responses the fixture sampled, behaviour log-probs moved off the sampled ones.
    await initTfBackend('tensorflow');
    const base = loadHfModel(BASE);
    const specs = GROUPS.flatMap((g, gi) => g.flatMap((s, si) => Array.from({ length: s.k }, (_, mi) => ({ gi, si, mi }))));
    const longContext = Array.from({ length: 300 }, (_, i) => (i * 37 + 11) % 440);
    const contexts = specs.map(({ gi, si, mi }) => (gi === 1 && si === 1 && mi === 0 ? longContext : [10 + gi, 40 + 3 * si, 7 + mi, 99, 5 * gi + mi]));
    let groups: AdvantageGroup[];
    try {
      const sampled = await sampleBatch(base.model, contexts, { maxNewTokens: 6, temperature: TEMPERATURE, seed: 29 });
      let n = 0;
      groups = GROUPS.map((g, gi) =>
        advantageGroup(
          `ptd-g${gi}`,
          g.map((s, si) => {
            const members: SetMember[] = Array.from({ length: s.k }, (_, mi) => {
              const x = sampled[n];
              const context = contexts[n++];
              const logpOld = x.logProbs.map((lp, j) => Math.min(0, lp + s.shift * (j % 2 ? 1 : -0.5)));
              const lossMask = gi === 1 && si === 1 && mi === 1 ? x.tokens.map((_, j) => j !== 1) : undefined;
              return member({
                outputId: `ptd-g${gi}/s${si}/o${mi}`,
                context,
                response: x.tokens,
                logpOld,
                lossMask,
                version: s.version ?? 0,
                temperature: TEMPERATURE,
              });
            });
            return { set: activeSet(`ptd-g${gi}/s${si}`, members), advantage: s.advantage };
          }),
        ),
      );
    } finally {
      base.model.dispose();
      tf.disposeVariables();
    }

    const prefix = uniquePrefix('python-trainer-dist');
    const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
    const outOne = topicCatalog({ prefix: `${prefix}one.`, rawPartitions: 1, derivedPartitions: 1 });
    const outDist = topicCatalog({ prefix: `${prefix}dist.`, rawPartitions: 1, derivedPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, [catalog.advantageGroups, outOne.policyVersions, outOne.policyUpdates, outDist.policyVersions, outDist.policyUpdates]);
    } finally {
      await admin.disconnect();
    }
    await produceGroups(kafka, catalog.advantageGroups.name, groups);

    const dir = tempDir('python-trainer-dist');
    const args = (name: string, out: string) => [
      '--model-dir',
      BASE,
      '--policy',
      'solver',
      '--brokers',
      brokers.join(','),
      '--topic-prefix',
      prefix,
      '--sets-per-update',
      '4',
      '--exit-at-end',
      '--device',
      'cpu',
      '--lr',
      '0.001',
      '--max-policy-lag',
      '100',
      '--micro-batch-tokens',
      '600',
      '--group-id',
      `${prefix}${name}`,
      '--records',
      path.join(dir, `${name}.jsonl`),
      '--checkpoint-dir',
      path.join(dir, `${name}-ckpt`),
      '--publish',
      '--output-prefix',
      out,
    ];

    // The reference: the same trainer, one process.
    const one = run('python3', [SCRIPT, ...args('one', `${prefix}one.`)]);
    ok(one, 'python3 srpo_trainer.py (one process)');
    const ref = readRecords(path.join(dir, 'one.jsonl')).lines.filter((r): r is Update => r.kind === 'update');
    expect(ref.map((u) => [u.versionAfter, u.groups.map((g) => g.groupId), u.diagnostics['batch/sets']])).toEqual([
      [1, ['ptd-g0', 'ptd-g1'], 5],
      [2, ['ptd-g2', 'ptd-g3'], 4],
      [3, ['ptd-g4'], 1],
    ]);
    expect(ref[0].diagnostics['memory/micro_batches']).toBeGreaterThan(1);

    // Two ranks; rank 1 is killed in update 2 before the all-reduce, then the run restarts.
    const torchrun = ['--standalone', '--nproc_per_node', '2', SCRIPT, ...args('dist', `${prefix}dist.`), '--backend', 'gloo'];
    const killed = run('torchrun', torchrun, { SRPO_TRAINER_FAULT: '1:2:before-allreduce' });
    expect(killed.status).not.toBe(0);
    expect(killed.stderr).toMatch(/"msg": "fault injected: SIGKILL", "component": "python-trainer", "rank": 1, "update": 2, "point": "before-allreduce"/);
    const afterKill = readRecords(path.join(dir, 'dist.jsonl'));
    expect(afterKill.text.endsWith('\n')).toBe(true);
    expect(afterKill.lines.map((r) => (r.kind === 'update' ? r.versionAfter : r.kind))).toEqual([1]);

    const resumed = run('torchrun', torchrun);
    ok(resumed, `torchrun ${torchrun.join(' ')}`);
    const { lines, text } = readRecords(path.join(dir, 'dist.jsonl'));
    expect(text.endsWith('\n')).toBe(true);
    expect(lines.map((r) => (r.kind === 'update' ? `v${r.versionAfter}` : `${r.kind}:${r.groupId}:${r.reason}`))).toEqual([
      'v1',
      'v2',
      'skip:ptd-g5:future-version',
      'v3',
    ]);
    const dist = lines.filter((r): r is Update => r.kind === 'update');
    expect(resumed.stderr).toContain(`"version": 1, "weightsHash": "${dist[0].weightsHashAfter}"`); // resumed at v1 on both ranks
    expect(dist.every((u) => u.backend.endsWith('-cpu-gloox2') && u.diagnostics['dist/world_size'] === 2)).toBe(true);

    // Against the one-process run.
    const ledger = (u: Update) =>
      u.groups.map((g) => ({ groupId: g.groupId, source: g.source, setIds: g.setIds, advantages: g.advantages, sources: g.sources }));
    expect(dist.map((u) => [u.updateId, u.versionBefore, u.versionAfter])).toEqual(ref.map((u) => [u.updateId, u.versionBefore, u.versionAfter]));
    expect(dist.map(ledger)).toEqual(ref.map(ledger));
    expect(dist[0].weightsHashBefore).toBe(ref[0].weightsHashBefore);
    // Update 1 is at the same (version-0) weights on both sides: its loss and gradient norm differ only by
    // the order float32 sums run in (shards, micro-batch widths, the all-reduce). Updates 2 and 3 also carry
    // the previous steps' differences. The weights after Adam: a gradient entry that is rounding noise (the
    // key projection's bias has an exactly-zero gradient in exact arithmetic: softmax ignores a shift of
    // every key) is divided by its own magnitude, so those few entries move by a noise-sized fraction of
    // lr on each side, and max |diff| <= 1e-6 cannot hold for them; the rest of the weights agree.
    const lr = 0.001;
    const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-12);
    const lossDiff = dist.map((u, i) => Math.abs(u.loss - ref[i].loss));
    const gradRel = dist.map((u, i) => rel(u.gradNorm, ref[i].gradNorm));
    const base0 = safetensors(path.join(BASE, 'model.safetensors'));
    const weights = dist.map((u, i) => {
      const a = safetensors(path.join(u.checkpointUri, 'model.safetensors'));
      const b = safetensors(path.join(ref[i].checkpointUri, 'model.safetensors'));
      expect([...a.keys()].sort()).toEqual([...b.keys()].sort());
      let max = 0;
      let over = 0;
      let count = 0;
      let diff2 = 0;
      let step2 = 0;
      for (const [name, x] of a) {
        const y = b.get(name)!;
        const w0 = base0.get(name)!;
        expect(y.length).toBe(x.length);
        for (let j = 0; j < x.length; j++) {
          const d = Math.abs(x[j] - y[j]);
          max = Math.max(max, d);
          over += d > 1e-6 ? 1 : 0;
          diff2 += d * d;
          step2 += (y[j] - w0[j]) ** 2;
        }
        count += x.length;
      }
      return { max, over, count, relL2: Math.sqrt(diff2 / step2), hashEqual: u.weightsHashAfter === ref[i].weightsHashAfter, stepL2: Math.sqrt(step2) };
    });
    console.log(
      `python-trainer torchrun x2 gloo vs one process: loss ${dist.map((u, i) => `${u.loss} / ${ref[i].loss}`).join(', ')}; ` +
        `|loss diff| ${lossDiff.map((x) => x.toExponential(2)).join(', ')} (relative ${dist.map((u, i) => rel(u.loss, ref[i].loss).toExponential(2)).join(', ')}); ` +
        `gradient norm relative diff ${gradRel.map((x) => x.toExponential(2)).join(', ')}; weights v1-v3: max |diff| ${weights.map((w) => w.max.toExponential(2)).join(', ')}, ` +
        `entries over 1e-6 ${weights.map((w) => `${w.over}/${w.count}`).join(', ')}, |diff|/|update| (L2) ${weights.map((w) => w.relL2.toExponential(2)).join(', ')}, ` +
        `hash equal ${weights.map((w) => w.hashEqual).join(', ')}`,
    );
    weights.forEach((w, i) => {
      expect({
        update: i + 1,
        loss: lossDiff[i] <= 1e-5 * Math.max(1, Math.abs(ref[i].loss)),
        gradNorm: gradRel[i] <= (i === 0 ? 1e-5 : 1e-4),
        relL2: w.relL2 <= 1e-3, // the weights' difference against the distance they moved from version 0
        over: w.over <= w.count * 1e-3, // at most 0.1 % of the entries further apart than 1e-6
        max: w.max <= 0.2 * lr, // none by more than a fifth of one Adam step
        moved: w.stepL2 > 10 * lr, // and the weights did move (about lr per entry and update: 0.3 in L2 per update)
      }).toEqual({ update: i + 1, loss: true, gradNorm: true, relL2: true, over: true, max: true, moved: true });
    });
    for (const key of ['losses/clip_frac_low', 'losses/clip_frac_high', 'losses/clip_frac_dual', 'batch/sets', 'batch/members', 'batch/tokens'])
      expect(dist.map((u) => u.diagnostics[key])).toEqual(ref.map((u) => u.diagnostics[key]));
    // Both ranks end on the recorded weights.
    const last = dist[2].weightsHashAfter;
    for (const rank of [0, 1])
      expect(resumed.stderr).toContain(`"msg": "final weights", "component": "python-trainer", "rank": ${rank}, "weightsHash": "${last}", "ranksAgree": true`);

    // Rank 0 alone published, each version once; the offsets are committed past the last group.
    const codec = new EventCodec();
    const versions = (await readTopicsToEnd(kafka, [outDist.policyVersions.name])).map((r) => toPlain(codec.decodeAs('PolicyVersion', r.value)));
    expect(versions.map((v) => [v.version, v.weightsHash])).toEqual(dist.map((u) => [u.versionAfter, u.weightsHashAfter]));
    const admin2 = kafka.admin();
    await admin2.connect();
    try {
      const [committed] = await admin2.fetchOffsets({ groupId: `${prefix}dist`, topics: [catalog.advantageGroups.name] });
      expect(committed.partitions.map((p) => p.offset)).toEqual([String(GROUPS.length)]);
    } finally {
      await admin2.disconnect();
    }
    // No prompt content in what either run printed.
    for (const out of [one, killed, resumed]) expect(out.stderr + out.stdout).not.toContain(contexts[0].join(', '));

    // The unit checks: the shard rule, the W/S normalization (uneven, micro-batches, an empty rank), torn records.
    const unit = spawnSync('python3', ['-m', 'unittest', path.join('examples', 'python-trainer', 'test_srpo_dist.py')], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', OMP_NUM_THREADS: '1' },
    });
    ok(unit, 'python3 -m unittest examples/python-trainer/test_srpo_dist.py');
    expect(unit.stderr).toMatch(/Ran 3 tests[\s\S]*\nOK/);
  }, 240_000);
});
