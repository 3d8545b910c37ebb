/**
 * The weights of a Hugging Face model directory, as `transformers` lays them out: one
 * `model.safetensors`, or shards `model-00001-of-0000N.safetensors` listed by
 * `model.safetensors.index.json` (`weight_map`: tensor name → shard file). Opening reads only
 * headers and cross-checks the index against the shards, so that a directory assembled from a
 * partial download or two different saves is refused by name rather than loaded half-wrong.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ErrorCode, SrpoError, errorMessage } from '@srpo/core';
import {
  SAFETENSORS_DTYPES,
  SAFETENSORS_ITEM_BYTES,
  checkSafetensorsInputs,
  readSafetensorsHeader,
  readSafetensorsTensor,
  writeSafetensors,
  type SafetensorsDtype,
  type SafetensorsHeader,
  type SafetensorsTensorInfo,
  type SafetensorsTensorInput,
} from './safetensors';

export const HF_WEIGHTS_FILE = 'model.safetensors';
export const HF_WEIGHTS_INDEX = 'model.safetensors.index.json';
/** What `transformers` deletes as a previous save's shard (its `(.*?)-\d{5}-of-\d{5}` pattern). */
const SHARD_NAME = /^model-\d{5}-of-\d{5}\.safetensors$/;

export interface HfWeightFiles {
  dir: string;
  /** The weight files read (full paths): the single file, or the shards sorted by name (so in shard order). */
  files: string[];
  tensors: Map<string, { file: string; info: SafetensorsTensorInfo; header: SafetensorsHeader }>;
}

export interface HfTensor {
  shape: number[];
  dtype: SafetensorsDtype;
  data: Float32Array;
}

export interface SaveHfWeightsOptions {
  /** Largest data bytes per shard (headers not counted, as in transformers); default 5 GB. */
  maxShardBytes?: number;
  /** Dtype for tensors that do not name their own; default F32. */
  dtype?: SafetensorsDtype;
  /** Each file's `__metadata__`; `format: "pt"` is added unless given, as transformers requires it to load. */
  metadata?: Record<string, string>;
}

const bad = (code: ErrorCode, file: string, field: string, problem: string): SrpoError =>
  new SrpoError(code, `${file}: ${field} ${problem}`, { field, details: { file } });

/** Index: `{"metadata": {...}?, "weight_map": {name: shard}}`; shard names must be plain files of `dir`. */
function readIndex(indexFile: string): Map<string, string> {
  let root: unknown;
  try {
    root = JSON.parse(fs.readFileSync(indexFile, 'utf8'));
  } catch (e) {
    throw bad(ErrorCode.INTEGRITY_FAILED, indexFile, 'index', `is not readable JSON (${errorMessage(e)})`);
  }
  const map = typeof root === 'object' && root !== null ? (root as Record<string, unknown>).weight_map : undefined;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) {
    throw bad(ErrorCode.INTEGRITY_FAILED, indexFile, 'weight_map', 'is missing or not an object of tensor name → shard file');
  }
  const out = new Map<string, string>();
  for (const [name, shard] of Object.entries(map)) {
    const field = `weight_map[${JSON.stringify(name)}]`;
    if (typeof shard !== 'string' || !shard.endsWith('.safetensors') || shard !== path.basename(shard) || shard.startsWith('.')) {
      // A path outside the directory ("../x", "/etc/x") must never be opened on an index's say-so.
      throw bad(ErrorCode.INTEGRITY_FAILED, indexFile, field, `must be a .safetensors file name in the same directory, got ${JSON.stringify(shard)}`);
    }
    out.set(name, shard);
  }
  if (out.size === 0) throw bad(ErrorCode.INTEGRITY_FAILED, indexFile, 'weight_map', 'is empty');
  return out;
}

/**
 * Opens the weights of `dir`. Like `transformers.from_pretrained`, a present `model.safetensors`
 * wins over an index (its loader tests for the single file first). For a sharded directory it
 * checks that every shard the index names exists, that every tensor of `weight_map` is in the
 * shard it names and every tensor of a shard is in `weight_map` for that shard (so none is in two
 * shards), and that no `model-NNNNN-of-NNNNN.safetensors` the index does not name lies beside it
 * (a leftover of another save).
 */
export function openHfWeights(dir: string): HfWeightFiles {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) {
    throw bad(ErrorCode.NOT_FOUND, dir, 'model directory', 'does not exist or is not a directory');
  }
  const single = path.join(dir, HF_WEIGHTS_FILE);
  const indexFile = path.join(dir, HF_WEIGHTS_INDEX);
  const tensors: HfWeightFiles['tensors'] = new Map();
  if (fs.existsSync(single)) {
    const header = readSafetensorsHeader(single);
    for (const [name, info] of header.tensors) tensors.set(name, { file: single, info, header });
    return { dir, files: [single], tensors };
  }
  if (!fs.existsSync(indexFile)) {
    throw bad(ErrorCode.NOT_FOUND, dir, 'weights', `are missing: neither ${HF_WEIGHTS_FILE} nor ${HF_WEIGHTS_INDEX} is in the directory`);
  }
  const weightMap = readIndex(indexFile);
  const shards = [...new Set(weightMap.values())].sort();
  const headers = new Map<string, SafetensorsHeader>();
  for (const shard of shards) {
    const file = path.join(dir, shard);
    if (!fs.existsSync(file)) {
      throw new SrpoError(ErrorCode.NOT_FOUND, `${indexFile}: weight_map names shard ${shard}, which is missing from ${dir}`, {
        field: 'weight_map',
        details: { file: indexFile, shard },
      });
    }
    headers.set(shard, readSafetensorsHeader(file));
  }
  for (const [name, shard] of weightMap) {
    const header = headers.get(shard) as SafetensorsHeader;
    const info = header.tensors.get(name);
    if (!info) {
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `${header.file}: tensor ${JSON.stringify(name)} is missing, though ${HF_WEIGHTS_INDEX} weight_map puts it in this shard`,
        {
          field: `weight_map[${JSON.stringify(name)}]`,
          details: { file: header.file, tensor: name },
        },
      );
    }
    tensors.set(name, { file: header.file, info, header });
  }
  for (const [shard, header] of headers) {
    for (const name of header.tensors.keys()) {
      const listed = weightMap.get(name);
      if (listed === shard) continue;
      const problem = listed === undefined ? `is not in ${HF_WEIGHTS_INDEX} weight_map` : `is also in this shard, though weight_map puts it in ${listed}`;
      throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `${header.file}: tensor ${JSON.stringify(name)} ${problem}`, {
        field: `weight_map[${JSON.stringify(name)}]`,
        details: { file: header.file, tensor: name },
      });
    }
  }
  const stray = fs
    .readdirSync(dir)
    .filter((f) => SHARD_NAME.test(f) && !headers.has(f))
    .sort();
  if (stray.length > 0) {
    throw new SrpoError(
      ErrorCode.INTEGRITY_FAILED,
      `${indexFile}: ${stray.join(', ')} ${stray.length === 1 ? 'is a shard' : 'are shards'} the index does not name (left from another save?)`,
      {
        field: 'weight_map',
        details: { file: indexFile, stray },
      },
    );
  }
  return { dir, files: shards.map((s) => path.join(dir, s)), tensors };
}

/** Reads one tensor of an opened directory, widened to float32. */
export function readHfTensor(w: HfWeightFiles, name: string): HfTensor {
  const entry = w.tensors.get(name);
  if (!entry) {
    throw new SrpoError(ErrorCode.NOT_FOUND, `${w.dir}: tensor ${JSON.stringify(name)} is not in the model's weights (${w.tensors.size} tensors)`, {
      field: name,
      details: { dir: w.dir, tensor: name },
    });
  }
  return { shape: [...entry.info.shape], dtype: entry.info.dtype, data: readSafetensorsTensor(entry.header, name) };
}

/**
 * Splits tensors into shards exactly as huggingface_hub's `split_state_dict_into_shards_factory`
 * (which transformers' `save_pretrained` uses): in input order, a new shard starts when the next
 * tensor would push the current one over the limit, and a tensor larger than the limit gets a
 * shard of its own, placed at that point in the list (before the shard still being filled).
 */
function splitShards<T extends { bytes: number }>(items: T[], maxShardBytes: number): T[][] {
  const shards: T[][] = [];
  let current: T[] = [];
  let size = 0;
  for (const item of items) {
    if (item.bytes > maxShardBytes) {
      shards.push([item]);
      continue;
    }
    if (size + item.bytes > maxShardBytes && current.length > 0) {
      shards.push(current);
      current = [];
      size = 0;
    }
    current.push(item);
    size += item.bytes;
  }
  if (current.length > 0) shards.push(current);
  return shards;
}

/** `json.dumps(index, indent=2, sort_keys=True) + "\n"`, as transformers writes the index (non-ASCII escaped like Python's ensure_ascii). */
function formatIndex(metadata: Record<string, number>, weightMap: Array<[string, string]>): string {
  const str = (s: string) => JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
  const entries = (pairs: Array<[string, string]>) =>
    pairs
      .sort((a, b) => byCodePoint(a[0], b[0]))
      .map(([k, v]) => `    ${str(k)}: ${v}`)
      .join(',\n');
  const meta = entries(Object.entries(metadata).map(([k, v]) => [k, String(v)]));
  const map = entries(weightMap.map(([k, v]) => [k, str(v)]));
  return `{\n  "metadata": {\n${meta}\n  },\n  "weight_map": {\n${map}\n  }\n}\n`;
}

function removeIfPresent(file: string): void {
  fs.rmSync(file, { force: true });
}

function writeFileAtomic(file: string, text: string): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp-${process.pid}`);
  const fd = fs.openSync(tmp, 'w');
  try {
    fs.writeFileSync(fd, text, 'utf8');
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
}

/**
 * Writes tensors into `dir` as transformers' `save_pretrained` does: one `model.safetensors`
 * when everything fits in one shard, else `model-00001-of-0000N.safetensors`… plus the index
 * (`metadata.total_size`: data bytes; `metadata.total_parameters`: elements; `weight_map`).
 * Each file is written atomically; the directory is not: the previous entry point (single
 * file or index) is removed first and the new one written last, so a crash part-way leaves a
 * directory {@link openHfWeights} refuses rather than a mix of two saves. Shards of an earlier
 * save not overwritten are removed at the end, as transformers does. Returns the paths
 * written, the index last.
 */
export function saveHfWeights(dir: string, tensors: ReadonlyArray<SafetensorsTensorInput>, options: SaveHfWeightsOptions = {}): string[] {
  const maxShardBytes = options.maxShardBytes ?? 5_000_000_000;
  if (!Number.isSafeInteger(maxShardBytes) || maxShardBytes <= 0) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${dir}: maxShardBytes must be a positive integer, got ${maxShardBytes}`, { field: 'maxShardBytes' });
  }
  const dtype = options.dtype ?? 'F32';
  if (!(SAFETENSORS_DTYPES as readonly string[]).includes(dtype)) {
    throw new SrpoError(
      ErrorCode.VALIDATION_FAILED,
      `${dir}: dtype: unsupported dtype ${JSON.stringify(dtype)} (supported: ${SAFETENSORS_DTYPES.join(', ')})`,
      { field: 'dtype' },
    );
  }
  const metadata = { format: 'pt', ...options.metadata };
  const items = tensors.map((t) => {
    const d = t.dtype ?? dtype;
    return { tensor: { ...t, dtype: d }, bytes: t.data.length * (SAFETENSORS_ITEM_BYTES[d] ?? 0) };
  });
  // Every input is checked before the first file is touched: a bad tensor in shard 3 must not leave shards 1–2 behind.
  checkSafetensorsInputs(
    items.map((s) => s.tensor),
    metadata,
    dir,
  );
  const shards = splitShards(items, maxShardBytes);
  fs.mkdirSync(dir, { recursive: true });
  const single = path.join(dir, HF_WEIGHTS_FILE);
  const indexFile = path.join(dir, HF_WEIGHTS_INDEX);
  removeIfPresent(indexFile);
  if (shards.length <= 1) {
    writeSafetensors(single, shards[0]?.map((s) => s.tensor) ?? [], metadata);
    for (const f of fs.readdirSync(dir)) if (SHARD_NAME.test(f)) removeIfPresent(path.join(dir, f));
    return [single];
  }
  removeIfPresent(single);
  const n = String(shards.length).padStart(5, '0');
  const written: string[] = [];
  const weightMap: Array<[string, string]> = [];
  shards.forEach((shard, i) => {
    const name = `model-${String(i + 1).padStart(5, '0')}-of-${n}.safetensors`;
    writeSafetensors(
      path.join(dir, name),
      shard.map((s) => s.tensor),
      metadata,
    );
    written.push(path.join(dir, name));
    for (const s of shard) weightMap.push([s.tensor.name, name]);
  });
  const totalSize = items.reduce((sum, s) => sum + s.bytes, 0);
  const totalParameters = items.reduce((sum, s) => sum + s.tensor.data.length, 0);
  writeFileAtomic(indexFile, formatIndex({ total_parameters: totalParameters, total_size: totalSize }, weightMap));
  const keep = new Set(written.map((f) => path.basename(f)));
  for (const f of fs.readdirSync(dir)) if (SHARD_NAME.test(f) && !keep.has(f)) removeIfPresent(path.join(dir, f));
  return [...written, indexFile];
}
