import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, SrpoError } from '@srpo/core';
import {
  checkpointVersionDir,
  checkpointVersionOf,
  CheckpointStore,
  FileSystemIOHandler,
  loadCheckpoint,
  relabelCheckpoint,
  saveCheckpoint,
  weightsHash,
} from './checkpoint-store';
import { Policy } from './policy';
import { SrpoTrainer } from './srpo-step';
import { makeSets, nativeBackend, TINY } from './test/fixtures';

async function codeOf(p: Promise<unknown>): Promise<{ code?: ErrorCode; message: string }> {
  try {
    await p;
  } catch (e) {
    return { code: e instanceof SrpoError ? e.code : undefined, message: e instanceof Error ? e.message : String(e) };
  }
  throw new Error('expected a rejection');
}

describe('checkpoints', () => {
  let root: string;
  beforeAll(async () => {
    await nativeBackend();
    root = await fs.mkdtemp(path.join(os.tmpdir(), 'policy-ckpt-'));
  });
  afterAll(() => fs.rm(root, { recursive: true, force: true }));

  /** A policy trained for two steps, saved with its optimizer to a fresh directory. */
  async function trainedCheckpoint(name: string): Promise<{ dir: string; policy: Policy; trainer: SrpoTrainer }> {
    const policy = Policy.create('coder', TINY, 1);
    const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 1e-3 } });
    const sets = await makeSets(policy, 2, 3);
    await trainer.update(sets);
    await trainer.update(sets);
    const dir = path.join(root, name);
    await saveCheckpoint(dir, policy, trainer.optimizer);
    return { dir, policy, trainer };
  }

  it('round-trips weights, identity and optimizer state; training continues bit for bit', async () => {
    const { dir, policy, trainer } = await trainedCheckpoint('roundtrip');
    const loaded = await loadCheckpoint(dir);
    const restoredTrainer = new SrpoTrainer(loaded.policy, { schedule: { kind: 'constant', lr: 1e-3 } });
    try {
      expect(await fs.readdir(dir)).toEqual(['model.json', 'weights.bin']);
      expect(loaded.manifest).toMatchObject({ policyId: 'coder', version: 2, backend: 'tensorflow', optimizerStep: 2, formatVersion: 1 });
      expect(loaded.manifest.config).toEqual(policy.model.config);
      expect(loaded.manifest.weightsHash).toBe(await weightsHash(policy));
      expect(await weightsHash(loaded.policy)).toBe(await weightsHash(policy));
      expect(loaded.policy.id).toBe('coder');
      expect(loaded.policy.version).toBe(2);
      restoredTrainer.optimizer.setState(loaded.optimizerState as NonNullable<typeof loaded.optimizerState>);
      const sets = await makeSets(policy, 3, 2);
      await trainer.update(sets);
      await restoredTrainer.update(sets);
      expect(await weightsHash(loaded.policy)).toBe(await weightsHash(policy));
    } finally {
      restoredTrainer.dispose();
      loaded.policy.dispose();
      trainer.dispose();
      policy.dispose();
    }
  });

  it('relabels a checkpoint as another version: same weights and optimizer bytes, new version, and a changed source is refused', async () => {
    const { dir, policy, trainer } = await trainedCheckpoint('relabel-src');
    trainer.dispose();
    policy.dispose();
    const dest = path.join(root, 'relabel-dest');
    const manifest = await relabelCheckpoint(dir, dest, 7);
    const before = await loadCheckpoint(dir);
    const after = await loadCheckpoint(dest);
    try {
      expect(after.policy.version).toBe(7);
      expect(after.manifest).toMatchObject({ version: 7, policyId: 'coder', optimizerStep: 2, weightsHash: before.manifest.weightsHash });
      expect(manifest.dataHash).toBe(before.manifest.dataHash);
      expect(await fs.readFile(path.join(dest, 'weights.bin'))).toEqual(await fs.readFile(path.join(dir, 'weights.bin')));
      expect(await weightsHash(after.policy)).toBe(await weightsHash(before.policy));
    } finally {
      before.policy.dispose();
      after.policy.dispose();
    }
    const bin = path.join(dir, 'weights.bin');
    const bytes = await fs.readFile(bin);
    bytes[5] ^= 0x01;
    await fs.writeFile(bin, bytes);
    expect((await codeOf(relabelCheckpoint(dir, path.join(root, 'relabel-bad'), 8))).code).toBe(ErrorCode.INTEGRITY_FAILED);
  });

  it('saves without optimizer state too', async () => {
    const policy = Policy.create('solo', TINY, 4);
    try {
      const manifest = await saveCheckpoint(path.join(root, 'solo'), policy);
      expect(manifest.optimizerStep).toBeNull();
      const loaded = await loadCheckpoint(path.join(root, 'solo'));
      expect(loaded.optimizerState).toBeUndefined();
      expect(await weightsHash(loaded.policy)).toBe(manifest.weightsHash);
      loaded.policy.dispose();
    } finally {
      policy.dispose();
    }
  });

  it('refuses a weights file with one flipped byte, and creates no tensors doing so', async () => {
    const { dir, policy, trainer } = await trainedCheckpoint('flip');
    trainer.dispose();
    policy.dispose();
    const bin = path.join(dir, 'weights.bin');
    const bytes = await fs.readFile(bin);
    bytes[Math.floor(bytes.length / 3)] ^= 0x01;
    await fs.writeFile(bin, bytes);
    const before = tf.memory().numTensors;
    const err = await codeOf(loadCheckpoint(dir));
    expect(err.code).toBe(ErrorCode.INTEGRITY_FAILED);
    expect(err.message).toMatch(/weights.bin SHA-256/);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('refuses a truncated weights file', async () => {
    const { dir, policy, trainer } = await trainedCheckpoint('truncated');
    trainer.dispose();
    policy.dispose();
    const bin = path.join(dir, 'weights.bin');
    const bytes = await fs.readFile(bin);
    await fs.writeFile(bin, bytes.subarray(0, bytes.length - 4));
    const err = await codeOf(loadCheckpoint(dir));
    expect(err.code).toBe(ErrorCode.INTEGRITY_FAILED);
    expect(err.message).toMatch(/truncated/);
  });

  it('refuses an altered or unreadable model.json and a missing weights file', async () => {
    const { dir, policy, trainer } = await trainedCheckpoint('tampered');
    trainer.dispose();
    policy.dispose();
    const json = path.join(dir, 'model.json');
    const original = await fs.readFile(json, 'utf8');
    await fs.writeFile(json, original.replace('"policyId":"coder"', '"policyId":"codex"'));
    expect(await codeOf(loadCheckpoint(dir))).toMatchObject({ code: ErrorCode.INTEGRITY_FAILED, message: expect.stringMatching(/manifest digest/) });
    await fs.writeFile(json, original.replace('"version":2', '"version":3'));
    expect((await codeOf(loadCheckpoint(dir))).code).toBe(ErrorCode.INTEGRITY_FAILED);
    await fs.writeFile(json, original.slice(0, original.length - 10));
    expect(await codeOf(loadCheckpoint(dir))).toMatchObject({ code: ErrorCode.INTEGRITY_FAILED, message: expect.stringMatching(/not valid JSON/) });
    await fs.writeFile(json, original);
    await fs.rm(path.join(dir, 'weights.bin'));
    expect(await codeOf(loadCheckpoint(dir))).toMatchObject({ code: ErrorCode.INTEGRITY_FAILED, message: expect.stringMatching(/missing/) });
    expect((await codeOf(loadCheckpoint(path.join(root, 'does-not-exist')))).code).toBe(ErrorCode.NOT_FOUND);
  });

  it('FileSystemIOHandler is a tfjs IOHandler: artifacts round-trip through it', async () => {
    const handler = new FileSystemIOHandler(path.join(root, 'raw'));
    const w = tf.tensor2d([
      [1, 2],
      [3, 4],
    ]);
    const { data, specs } = await tf.io.encodeWeights({ w });
    const saved = await handler.save({ modelTopology: { kind: 'test' }, weightSpecs: specs, weightData: data, format: 'x' });
    expect(saved.modelArtifactsInfo.weightDataBytes).toBe(16);
    const loaded = await handler.load();
    expect(loaded.weightSpecs).toEqual(specs);
    expect(loaded.modelTopology).toEqual({ kind: 'test' });
    const decoded = tf.io.decodeWeights(loaded.weightData as ArrayBuffer, loaded.weightSpecs ?? []);
    expect(Array.from(await decoded.w.data())).toEqual([1, 2, 3, 4]);
    tf.dispose([w, decoded.w]);
  });

  it('CheckpointStore lays out <root>/<policyId>/v<version> and lists versions', async () => {
    const store = new CheckpointStore(path.join(root, 'store'));
    const policy = Policy.create('planner', TINY, 5);
    try {
      expect(await store.latest('planner')).toBeUndefined();
      await store.save(policy);
      policy.bumpVersion();
      policy.bumpVersion();
      await store.save(policy);
      await fs.mkdir(path.join(root, 'store', 'planner', 'v7')); // interrupted save: no model.json
      expect(await store.versions('planner')).toEqual([0, 2]);
      expect(await store.latest('planner')).toBe(2);
      const loaded = await store.load('planner', 2);
      expect(loaded.policy.version).toBe(2);
      loaded.policy.dispose();
      expect(() => store.dirFor('../etc', 1)).toThrow(/policyId/);
    } finally {
      policy.dispose();
    }
  });
});

describe('checkpoint layout', () => {
  it('names version directories v<N> under the policy directory, and reads only those names back', () => {
    expect(checkpointVersionDir(path.join('/ck', 'solver'), 12)).toBe(path.join('/ck', 'solver', 'v12'));
    expect(new CheckpointStore('/ck').dirFor('solver', 0)).toBe(path.join('/ck', 'solver', 'v0'));
    expect(checkpointVersionOf('v12')).toBe(12);
    expect(checkpointVersionOf('v0')).toBe(0);
    for (const other of ['v', 'v1a', 'x1', '.v3.pruned-1-2', 'V3', 'v-1']) expect(checkpointVersionOf(other)).toBeUndefined();
  });
});
