import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, SrpoError, ValidationError, errorMessage } from '@srpo/core';
import type { AdamOptimizer, AdamState } from './adam-optimizer';
import type { CausalLm } from './causal-lm';
import { modelFamily, type CheckpointTensor, type ModelTopology } from './model-family';
import { Policy, type PolicyModel } from './policy';
// The project's own transformer is always a known family: this import registers it.
import './transformer-family';

export const CHECKPOINT_FORMAT = 'srpo-policy-checkpoint';
export const CHECKPOINT_FORMAT_VERSION = 1;
const MODEL_JSON = 'model.json';
const WEIGHTS_BIN = 'weights.bin';
const OPT_M = 'optimizer/m/';
const OPT_V = 'optimizer/v/';

/** What a checkpoint says about itself (stored in model.json under `userDefinedMetadata.manifest`). */
export interface CheckpointManifest {
  formatVersion: number;
  policyId: string;
  version: number;
  /**
   * The model family ({@link ModelFamily}): `causal-transformer` (the project's own) or
   * `hf-llama` (registered by @srpo/hf). Absent in checkpoints written before Hugging Face
   * models: those are `causal-transformer`.
   */
  modelKind?: string;
  /** The model's config, as its family records it (`ResolvedTransformerConfig`, `HfModelConfig`). */
  config: unknown;
  /**
   * Written by the `hf-llama` family: the Hugging Face directory of version 0 (tokenizer,
   * config.json) and its hash.
   */
  base?: { dir: string; hash: string };
  /**
   * Written by the `hf-llama` family for a LoRA policy: the adapter's settings (@srpo/hf's
   * `LoraConfig`). The checkpoint then holds the adapter's factors only (`weightsHash` is
   * theirs); the frozen base weights are `base`'s, shared by every version and verified by
   * its hash on load.
   */
  lora?: unknown;
  /** `tf.getBackend()` at save time. Informational: weights load on any backend. */
  backend: string;
  /** {@link weightsHash} of the model weights (optimizer state excluded). */
  weightsHash: string;
  /** SHA-256 hex of the whole weights.bin (model weights and optimizer state). */
  dataHash: string;
  /** Optimizer steps applied, or null when the checkpoint holds no optimizer state. */
  optimizerStep: number | null;
  createdAt: string;
}

/** One weight to hash: canonical name, shape and float32 values. */
export interface HashableWeight {
  name: string;
  shape: readonly number[];
  dtype: 'float32';
  data: Float32Array;
}

/**
 * SHA-256 hex over weights in canonical order: sorted by name (code units),
 * each framed as `name\ndtype\nshape\nbyteLength\n` followed by its raw
 * little-endian float32 bytes. Identical weights give identical hashes on every
 * backend; a single flipped bit changes it.
 */
export function hashWeightValues(weights: readonly HashableWeight[]): string {
  const h = createHash('sha256');
  const sorted = [...weights].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const w of sorted) {
    const bytes = Buffer.from(w.data.buffer, w.data.byteOffset, w.data.byteLength);
    h.update(`${w.name}\n${w.dtype}\n${w.shape.join(',')}\n${bytes.byteLength}\n`, 'utf8');
    h.update(bytes);
  }
  return h.digest('hex');
}

/** {@link hashWeightValues} of a policy's (or model's) current weights. */
export async function weightsHash(source: Policy | CausalLm): Promise<string> {
  const model = source instanceof Policy ? source.model : source;
  const names = model.weightNames();
  const values = await Promise.all(names.map((n) => model.weight(n).data()));
  return hashWeightValues(names.map((n, i) => ({ name: n, shape: model.weight(n).shape, dtype: 'float32', data: values[i] as Float32Array })));
}

function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

function integrity(dir: string, problem: string, cause?: unknown): SrpoError {
  return new SrpoError(ErrorCode.INTEGRITY_FAILED, `checkpoint ${dir}: ${problem}`, { cause, details: { dir } });
}

/**
 * A tfjs `IOHandler` that stores model artifacts in a directory as
 * `model.json` (topology, weights manifest, metadata) and `weights.bin`.
 *
 * Each file is written to a temporary name, fsynced and renamed into place,
 * weights first and model.json last: a crash mid-save never leaves a
 * half-written file under either name. (Overwriting an existing checkpoint can
 * still pair the new weights with the old model.json; {@link loadCheckpoint}'s
 * hashes refuse that pair.) Loading checks the weight file against the
 * manifest's byte count; content checks belong to the caller.
 */
export class FileSystemIOHandler implements tf.io.IOHandler {
  constructor(readonly dir: string) {}

  async save(artifacts: tf.io.ModelArtifacts): Promise<tf.io.SaveResult> {
    const weightData = artifacts.weightData === undefined ? new ArrayBuffer(0) : tf.io.CompositeArrayBuffer.join(artifacts.weightData);
    const modelJson: tf.io.ModelJSON = {
      modelTopology: artifacts.modelTopology ?? {},
      format: artifacts.format,
      generatedBy: artifacts.generatedBy,
      convertedBy: artifacts.convertedBy ?? null,
      weightsManifest: [{ paths: [WEIGHTS_BIN], weights: artifacts.weightSpecs ?? [] }],
      ...(artifacts.userDefinedMetadata ? { userDefinedMetadata: artifacts.userDefinedMetadata } : {}),
    };
    await fs.mkdir(this.dir, { recursive: true });
    const json = JSON.stringify(modelJson);
    await writeAtomically(path.join(this.dir, WEIGHTS_BIN), new Uint8Array(weightData));
    await writeAtomically(path.join(this.dir, MODEL_JSON), Buffer.from(json, 'utf8'));
    return {
      modelArtifactsInfo: {
        dateSaved: new Date(),
        modelTopologyType: 'JSON',
        modelTopologyBytes: JSON.stringify(modelJson.modelTopology).length,
        weightSpecsBytes: JSON.stringify(modelJson.weightsManifest).length,
        weightDataBytes: weightData.byteLength,
      },
    };
  }

  async load(): Promise<tf.io.ModelArtifacts> {
    const jsonPath = path.join(this.dir, MODEL_JSON);
    let text: string;
    try {
      text = await fs.readFile(jsonPath, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new SrpoError(ErrorCode.NOT_FOUND, `checkpoint ${this.dir}: no ${MODEL_JSON}`, { cause: e, field: 'dir' });
      }
      throw new SrpoError(ErrorCode.UNAVAILABLE, `checkpoint ${this.dir}: cannot read ${MODEL_JSON}: ${errorMessage(e)}`, { cause: e, retriable: true });
    }
    let parsed: tf.io.ModelJSON;
    try {
      parsed = JSON.parse(text) as tf.io.ModelJSON;
    } catch (e) {
      throw integrity(this.dir, `${MODEL_JSON} is not valid JSON (${errorMessage(e)})`, e);
    }
    if (typeof parsed !== 'object' || parsed === null || !Array.isArray(parsed.weightsManifest) || parsed.weightsManifest.length !== 1) {
      throw integrity(this.dir, `${MODEL_JSON} has no single weights manifest group`);
    }
    const group = parsed.weightsManifest[0];
    if (!Array.isArray(group.paths) || group.paths.length !== 1 || group.paths[0] !== WEIGHTS_BIN || !Array.isArray(group.weights)) {
      throw integrity(this.dir, `${MODEL_JSON} weights manifest must name exactly ${WEIGHTS_BIN}`);
    }
    let expected = 0;
    for (const spec of group.weights) {
      if (spec.dtype !== 'float32' || !Array.isArray(spec.shape) || spec.shape.some((d) => !Number.isInteger(d) || d < 0) || spec.quantization) {
        throw integrity(this.dir, `weight ${String(spec.name)} has an unsupported spec (float32, unquantised, integer shape expected)`);
      }
      expected += spec.shape.reduce((a, b) => a * b, 1) * 4;
    }
    let bin: Buffer;
    try {
      bin = await fs.readFile(path.join(this.dir, WEIGHTS_BIN));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw integrity(this.dir, `${WEIGHTS_BIN} is missing`, e);
      throw new SrpoError(ErrorCode.UNAVAILABLE, `checkpoint ${this.dir}: cannot read ${WEIGHTS_BIN}: ${errorMessage(e)}`, { cause: e, retriable: true });
    }
    if (bin.byteLength !== expected) {
      throw integrity(this.dir, `${WEIGHTS_BIN} is ${bin.byteLength} bytes, the manifest describes ${expected} (truncated or extended)`);
    }
    return {
      modelTopology: parsed.modelTopology,
      format: parsed.format,
      generatedBy: parsed.generatedBy,
      convertedBy: parsed.convertedBy,
      weightSpecs: group.weights,
      // Copy into a fresh ArrayBuffer: a small Buffer may be a view into Node's shared pool.
      weightData: new Uint8Array(bin).buffer,
      userDefinedMetadata: parsed.userDefinedMetadata,
    };
  }
}

async function writeAtomically(file: string, data: Uint8Array): Promise<void> {
  const tmp = `${file}.tmp-${process.pid}-${Date.now()}`;
  const handle = await fs.open(tmp, 'w');
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.rename(tmp, file);
}

/**
 * Topology stored in model.json (enough, with the weights, to rebuild the model) and the
 * family's fields of the manifest: the topology's fields after `kind` and `config`, in order.
 */
function topologyOf(model: PolicyModel, dir: string): { topology: ModelTopology; manifestFields: Record<string, unknown> } {
  const topology = modelFamily(model.kind, `checkpoint ${dir}`).topology(model, dir);
  const { kind: _kind, config: _config, ...manifestFields } = topology;
  return { topology, manifestFields };
}

/** Hash over everything in model.json that is not a hash of itself: manifest, topology, weight specs. */
function manifestDigest(manifest: CheckpointManifest, topology: unknown, specs: unknown): string {
  return sha256Hex(JSON.stringify({ manifest, topology, specs }));
}

/**
 * Saves a policy's weights (and optionally its optimizer state) to `dir`
 * through {@link FileSystemIOHandler}. Overwrites an existing checkpoint there.
 */
export async function saveCheckpoint(dir: string, policy: Policy, optimizer?: AdamOptimizer): Promise<CheckpointManifest> {
  const model = policy.model;
  const names = model.weightNames();
  const values = await Promise.all(names.map((n) => model.weight(n).data() as Promise<Float32Array>));
  const hashable: HashableWeight[] = names.map((n, i) => ({ name: n, shape: model.weight(n).shape, dtype: 'float32', data: values[i] }));
  const entries: { name: string; shape: number[]; data: Float32Array }[] = hashable.map((w) => ({ name: w.name, shape: [...w.shape], data: w.data }));
  let optState: AdamState | undefined;
  if (optimizer) {
    optState = await optimizer.getState();
    for (const n of names) {
      const shape = model.weight(n).shape;
      entries.push({ name: OPT_M + n, shape, data: optState.m.get(n) as Float32Array });
      entries.push({ name: OPT_V + n, shape, data: optState.v.get(n) as Float32Array });
    }
  }
  const total = entries.reduce((a, e) => a + e.data.byteLength, 0);
  const bin = new Uint8Array(total);
  let off = 0;
  for (const e of entries) {
    bin.set(new Uint8Array(e.data.buffer, e.data.byteOffset, e.data.byteLength), off);
    off += e.data.byteLength;
  }
  const specs: tf.io.WeightsManifestEntry[] = entries.map((e) => ({ name: e.name, shape: e.shape, dtype: 'float32' }));
  const { topology, manifestFields } = topologyOf(model, dir);
  const manifest: CheckpointManifest = {
    formatVersion: CHECKPOINT_FORMAT_VERSION,
    policyId: policy.id,
    version: policy.version,
    modelKind: model.kind,
    config: model.config,
    ...manifestFields,
    backend: tf.getBackend(),
    weightsHash: hashWeightValues(hashable),
    dataHash: sha256Hex(bin),
    optimizerStep: optState ? optState.step : null,
    createdAt: new Date().toISOString(),
  };
  await new FileSystemIOHandler(dir).save({
    modelTopology: topology,
    format: CHECKPOINT_FORMAT,
    generatedBy: '@srpo/policy',
    convertedBy: null,
    weightSpecs: specs,
    weightData: bin.buffer,
    userDefinedMetadata: { manifest, manifestHash: manifestDigest(manifest, topology, specs) },
  });
  return manifest;
}

export interface LoadedCheckpoint {
  policy: Policy;
  manifest: CheckpointManifest;
  /** Present when the checkpoint was saved with an optimizer; apply with `AdamOptimizer.setState`. */
  optimizerState?: AdamState;
}

/**
 * Loads a checkpoint into a NEW policy (the caller installs it, e.g.
 * `PolicyRegistry.replace`). Everything is verified before any tensor is made:
 * format, manifest digest, weight-file length, the SHA-256 of weights.bin and
 * the weights hash of the decoded weights. Any mismatch throws
 * `SrpoError(INTEGRITY_FAILED)`; nothing is half-loaded.
 */
export async function loadCheckpoint(dir: string): Promise<LoadedCheckpoint> {
  const artifacts = await new FileSystemIOHandler(dir).load();
  if (artifacts.format !== CHECKPOINT_FORMAT) throw integrity(dir, `format is ${String(artifacts.format)}, expected ${CHECKPOINT_FORMAT}`);
  const meta = artifacts.userDefinedMetadata as { manifest?: CheckpointManifest; manifestHash?: string } | undefined;
  const manifest = meta?.manifest;
  const specs = artifacts.weightSpecs ?? [];
  if (!manifest || typeof meta?.manifestHash !== 'string') throw integrity(dir, 'model.json has no manifest');
  if (manifestDigest(manifest, artifacts.modelTopology, specs) !== meta.manifestHash) {
    throw integrity(dir, 'manifest digest mismatch: model.json was altered');
  }
  if (manifest.formatVersion !== CHECKPOINT_FORMAT_VERSION) throw integrity(dir, `unsupported format version ${manifest.formatVersion}`);
  const bin = new Uint8Array(artifacts.weightData as ArrayBuffer);
  const dataHash = sha256Hex(bin);
  if (dataHash !== manifest.dataHash) throw integrity(dir, `weights.bin SHA-256 ${dataHash} does not match the manifest's ${manifest.dataHash}`);

  const kind = manifest.modelKind ?? 'causal-transformer';
  const topology = artifacts.modelTopology as ModelTopology | undefined;
  if (topology?.kind !== kind) throw integrity(dir, `model kind ${String(topology?.kind)} in the topology, ${kind} in the manifest`);
  const family = modelFamily(kind, `checkpoint ${dir}`);
  try {
    family.checkManifest(manifest);
  } catch (e) {
    throw integrity(dir, errorMessage(e), e);
  }
  const shapes = new Map<string, number[]>();
  const weights = new Map<string, Float32Array>();
  const m = new Map<string, Float32Array>();
  const v = new Map<string, Float32Array>();
  const hashable: HashableWeight[] = [];
  let off = 0;
  for (const spec of specs) {
    const n = spec.shape.reduce((a, b) => a * b, 1);
    // Copy out so the arrays are aligned and independent of the file buffer.
    const data = new Float32Array(bin.buffer.slice(bin.byteOffset + off, bin.byteOffset + off + n * 4));
    off += n * 4;
    if (spec.name.startsWith(OPT_M)) m.set(spec.name.slice(OPT_M.length), data);
    else if (spec.name.startsWith(OPT_V)) v.set(spec.name.slice(OPT_V.length), data);
    else {
      weights.set(spec.name, data);
      shapes.set(spec.name, spec.shape);
      hashable.push({ name: spec.name, shape: spec.shape, dtype: 'float32', data });
    }
  }
  const hash = hashWeightValues(hashable);
  if (hash !== manifest.weightsHash) throw integrity(dir, `weights hash ${hash} does not match the manifest's ${manifest.weightsHash}`);

  let model: PolicyModel;
  try {
    const tensors = new Map<string, CheckpointTensor>([...weights].map(([n, data]) => [n, { shape: shapes.get(n) as number[], data }] as const));
    model = family.restore(manifest, tensors, dir);
  } catch (e) {
    throw integrity(dir, `weights do not fit the config: ${errorMessage(e)}`, e);
  }
  let policy: Policy;
  try {
    policy = new Policy(manifest.policyId, model, manifest.version);
  } catch (e) {
    model.dispose();
    throw integrity(dir, `invalid policy identity: ${errorMessage(e)}`, e);
  }
  let optimizerState: AdamState | undefined;
  if (manifest.optimizerStep !== null) {
    if (m.size !== weights.size || v.size !== weights.size || !Number.isSafeInteger(manifest.optimizerStep)) {
      policy.dispose();
      throw integrity(dir, 'optimizer state is incomplete');
    }
    optimizerState = { step: manifest.optimizerStep, m, v };
  }
  return { policy, manifest, optimizerState };
}

/**
 * Copies the checkpoint in `src` to `dest` as version `version` of the same policy: the same
 * bytes (weights and optimizer state, so `weightsHash` and `dataHash` are unchanged), with the
 * manifest's version (and its digest) rewritten. `src` is verified first, as
 * {@link loadCheckpoint} verifies it. Used to adopt a rebuilt lineage's head as the next version
 * of the live one (`srpo erase --adopt`, docs/erasure.md).
 *
 * @throws SrpoError INTEGRITY_FAILED when `src` does not verify.
 */
export async function relabelCheckpoint(src: string, dest: string, version: number): Promise<CheckpointManifest> {
  const verified = await loadCheckpoint(src);
  verified.policy.dispose();
  const artifacts = await new FileSystemIOHandler(src).load();
  const meta = artifacts.userDefinedMetadata as { manifest: CheckpointManifest; manifestHash: string };
  const manifest: CheckpointManifest = { ...meta.manifest, version, createdAt: new Date().toISOString() };
  const manifestHash = manifestDigest(manifest, artifacts.modelTopology, artifacts.weightSpecs ?? []);
  await new FileSystemIOHandler(dest).save({ ...artifacts, userDefinedMetadata: { ...meta, manifest, manifestHash } });
  return manifest;
}

/**
 * The checkpoint layout, in one place: a policy's versions live in `<root>/<policyId>/`, each in
 * `v<version>/`. The store, retention (libs/trainer) and the audit's rebuild (libs/audit) all
 * name directories through these two functions.
 */
export function checkpointVersionDir(policyDir: string, version: number): string {
  return path.join(policyDir, `v${version}`);
}

/** The version a directory name of the layout holds (`v12` → 12), or undefined for any other name. */
export function checkpointVersionOf(dirName: string): number | undefined {
  const match = /^v(\d+)$/.exec(dirName);
  return match ? Number(match[1]) : undefined;
}

/**
 * Checkpoints laid out as `<root>/<policyId>/v<version>/` ({@link checkpointVersionDir}). Policy
 * ids are used as directory names, so they must be safe path segments.
 */
export class CheckpointStore {
  constructor(readonly root: string) {}

  dirFor(policyId: string, version: number): string {
    if (!/^[A-Za-z0-9._-]+$/.test(policyId) || policyId === '.' || policyId === '..') {
      throw new ValidationError('policyId', `must match [A-Za-z0-9._-]+ to be used as a directory name, got ${JSON.stringify(policyId)}`);
    }
    return checkpointVersionDir(path.join(this.root, policyId), version);
  }

  save(policy: Policy, optimizer?: AdamOptimizer): Promise<CheckpointManifest> {
    return saveCheckpoint(this.dirFor(policy.id, policy.version), policy, optimizer);
  }

  load(policyId: string, version: number): Promise<LoadedCheckpoint> {
    return loadCheckpoint(this.dirFor(policyId, version));
  }

  /** Versions with a model.json for a policy, ascending. */
  async versions(policyId: string): Promise<number[]> {
    let entries: string[];
    try {
      entries = await fs.readdir(path.dirname(this.dirFor(policyId, 0)));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
    const out: number[] = [];
    for (const e of entries) {
      const version = checkpointVersionOf(e);
      if (version === undefined) continue;
      try {
        await fs.access(path.join(this.dirFor(policyId, version), MODEL_JSON));
        out.push(version);
      } catch {
        // A directory without model.json is an interrupted save: not a checkpoint.
      }
    }
    return out.sort((a, b) => a - b);
  }

  /** The highest saved version, or undefined. */
  async latest(policyId: string): Promise<number | undefined> {
    const vs = await this.versions(policyId);
    return vs.length > 0 ? vs[vs.length - 1] : undefined;
  }
}
