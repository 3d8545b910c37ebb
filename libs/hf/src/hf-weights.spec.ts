import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ErrorCode, SrpoError } from '@srpo/core';
import { HF_WEIGHTS_FILE, HF_WEIGHTS_INDEX, openHfWeights, readHfTensor, saveHfWeights } from './hf-weights';
import { encodeSafetensors, readSafetensorsHeader, type SafetensorsTensorInput } from './safetensors';

const REFERENCE = path.join(__dirname, 'safetensors-reference.py');
const INSTALL = 'python3 -m pip install -r scripts/reference/requirements.txt';

function expectFailure(run: () => unknown, code: ErrorCode, ...parts: string[]): void {
  let caught: unknown;
  try {
    run();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(SrpoError);
  expect((caught as SrpoError).code).toBe(code);
  for (const part of parts) expect((caught as SrpoError).message).toContain(part);
}

const tensor = (name: string, n: number, start = 0): SafetensorsTensorInput => ({
  name,
  shape: [n],
  data: Float32Array.from({ length: n }, (_, i) => start + i * 0.5),
});
/** Sizes in F32 bytes: a 8, b 16, c 8, d 40, e 8 → with 24-byte shards: [a,b] [d] [c,e] (d, over the limit, is placed on its own where it is met). */
const MODEL = [tensor('a', 2), tensor('b', 4, 10), tensor('c', 2, 20), tensor('d', 10, 30), tensor('e', 2, 40)];
const S = (i: number, n: number) => `model-${String(i).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.safetensors`;

let root: string;
let count = 0;
const freshDir = () => path.join(root, `m${count++}`);
beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'hf-weights-spec-'));
});
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const readIndex = (dir: string) =>
  JSON.parse(fs.readFileSync(path.join(dir, HF_WEIGHTS_INDEX), 'utf8')) as { metadata: Record<string, number>; weight_map: Record<string, string> };
const writeIndex = (dir: string, index: unknown) => fs.writeFileSync(path.join(dir, HF_WEIGHTS_INDEX), JSON.stringify(index));

describe('saveHfWeights / openHfWeights', () => {
  it('shards like transformers and reads every tensor back', () => {
    const dir = freshDir();
    const written = saveHfWeights(dir, MODEL, { maxShardBytes: 24 });
    expect(written).toEqual([S(1, 3), S(2, 3), S(3, 3), HF_WEIGHTS_INDEX].map((f) => path.join(dir, f)));
    expect(readIndex(dir).weight_map).toEqual({ a: S(1, 3), b: S(1, 3), d: S(2, 3), c: S(3, 3), e: S(3, 3) });
    expect(fs.readdirSync(dir).sort()).toEqual([S(1, 3), S(2, 3), S(3, 3), HF_WEIGHTS_INDEX]);
    const w = openHfWeights(dir);
    expect(w.files).toEqual([S(1, 3), S(2, 3), S(3, 3)].map((f) => path.join(dir, f)));
    expect([...w.tensors.keys()].sort()).toEqual(['a', 'b', 'c', 'd', 'e']);
    for (const t of MODEL) {
      const back = readHfTensor(w, t.name);
      expect(back).toEqual({ shape: [...t.shape], dtype: 'F32', data: t.data });
    }
    expect(readSafetensorsHeader(path.join(dir, S(2, 3))).metadata).toEqual({ format: 'pt' });
  });

  it('writes the index text exactly as transformers does (json.dumps indent=2, sort_keys, trailing newline)', () => {
    const dir = freshDir();
    saveHfWeights(dir, [tensor('b', 2), tensor('a', 2)], { maxShardBytes: 8 });
    expect(fs.readFileSync(path.join(dir, HF_WEIGHTS_INDEX), 'utf8')).toBe(
      '{\n  "metadata": {\n    "total_parameters": 4,\n    "total_size": 16\n  },\n  "weight_map": {\n' +
        `    "a": "${S(2, 2)}",\n    "b": "${S(1, 2)}"\n  }\n}\n`,
    );
  });

  it('writes one model.safetensors without an index when everything fits; total_size counts the chosen dtype', () => {
    const dir = freshDir();
    expect(saveHfWeights(dir, MODEL)).toEqual([path.join(dir, HF_WEIGHTS_FILE)]);
    expect(fs.readdirSync(dir)).toEqual([HF_WEIGHTS_FILE]);
    const bf = freshDir();
    saveHfWeights(bf, MODEL, { dtype: 'BF16', maxShardBytes: 20, metadata: { epoch: '3' } });
    expect(readIndex(bf).metadata).toEqual({ total_parameters: 20, total_size: 40 });
    const w = openHfWeights(bf);
    expect(readHfTensor(w, 'd')).toEqual({ shape: [10], dtype: 'BF16', data: MODEL[3].data }); // k/2 for small k is exact in bf16
    expect(w.tensors.get('d')?.header.metadata).toEqual({ format: 'pt', epoch: '3' });
  });

  it('replaces an earlier save: stale shards, index and single file are removed', () => {
    const dir = freshDir();
    saveHfWeights(dir, MODEL, { maxShardBytes: 24 });
    saveHfWeights(dir, MODEL, { maxShardBytes: 48 });
    expect(fs.readdirSync(dir).sort()).toEqual([S(1, 2), S(2, 2), HF_WEIGHTS_INDEX]);
    saveHfWeights(dir, MODEL);
    expect(fs.readdirSync(dir)).toEqual([HF_WEIGHTS_FILE]);
    saveHfWeights(dir, MODEL, { maxShardBytes: 24 });
    expect(fs.readdirSync(dir).sort()).toEqual([S(1, 3), S(2, 3), S(3, 3), HF_WEIGHTS_INDEX]);
    expect(openHfWeights(dir).files).toHaveLength(3);
  });

  it('checks every input before writing anything', () => {
    const dir = freshDir();
    const bad = [...MODEL, { name: 'z', shape: [3], data: new Float32Array(2) }];
    expectFailure(
      () => saveHfWeights(dir, bad, { maxShardBytes: 24 }),
      ErrorCode.VALIDATION_FAILED,
      dir,
      'tensor "z"',
      'shape [3] has 3 elements but data has 2',
    );
    expect(fs.existsSync(dir)).toBe(false);
    expectFailure(() => saveHfWeights(dir, MODEL, { maxShardBytes: 0 }), ErrorCode.VALIDATION_FAILED, 'maxShardBytes');
  });

  it('prefers model.safetensors when an index is present too, as transformers does', () => {
    const dir = freshDir();
    saveHfWeights(dir, [tensor('only', 3)]);
    writeIndex(dir, { metadata: {}, weight_map: { other: S(1, 1) } });
    const w = openHfWeights(dir);
    expect(w.files).toEqual([path.join(dir, HF_WEIGHTS_FILE)]);
    expect(Array.from(readHfTensor(w, 'only').data)).toEqual([0, 0.5, 1]);
    expectFailure(() => readHfTensor(w, 'other'), ErrorCode.NOT_FOUND, dir, 'tensor "other" is not in the model\'s weights (1 tensors)');
  });
});

describe('openHfWeights refuses inconsistent directories', () => {
  const sharded = () => {
    const dir = freshDir();
    saveHfWeights(dir, MODEL, { maxShardBytes: 24 });
    return dir;
  };
  it('a missing directory, and one with no weights', () => {
    expectFailure(() => openHfWeights(path.join(root, 'nope')), ErrorCode.NOT_FOUND, 'nope', 'does not exist');
    const empty = freshDir();
    fs.mkdirSync(empty);
    expectFailure(() => openHfWeights(empty), ErrorCode.NOT_FOUND, empty, `neither ${HF_WEIGHTS_FILE} nor ${HF_WEIGHTS_INDEX}`);
  });
  it('an index naming a missing shard', () => {
    const dir = sharded();
    fs.rmSync(path.join(dir, S(2, 3)));
    expectFailure(() => openHfWeights(dir), ErrorCode.NOT_FOUND, HF_WEIGHTS_INDEX, `weight_map names shard ${S(2, 3)}, which is missing`);
  });
  it('a tensor of weight_map missing from its shard', () => {
    const dir = sharded();
    const index = readIndex(dir);
    index.weight_map['model.layers.0.mlp.up_proj.weight'] = S(3, 3);
    writeIndex(dir, index);
    expectFailure(() => openHfWeights(dir), ErrorCode.INTEGRITY_FAILED, path.join(dir, S(3, 3)), 'tensor "model.layers.0.mlp.up_proj.weight" is missing');
  });
  it('a tensor of a shard missing from weight_map', () => {
    const dir = sharded();
    const index = readIndex(dir);
    delete index.weight_map.e;
    writeIndex(dir, index);
    expectFailure(() => openHfWeights(dir), ErrorCode.INTEGRITY_FAILED, S(3, 3), 'tensor "e" is not in model.safetensors.index.json weight_map');
  });
  it('a tensor in two shards', () => {
    const dir = sharded();
    fs.writeFileSync(path.join(dir, S(2, 3)), encodeSafetensors([tensor('d', 10), tensor('a', 2)], { format: 'pt' }));
    expectFailure(() => openHfWeights(dir), ErrorCode.INTEGRITY_FAILED, S(2, 3), `tensor "a" is also in this shard, though weight_map puts it in ${S(1, 3)}`);
  });
  it('a stray shard of another save', () => {
    const dir = sharded();
    fs.writeFileSync(path.join(dir, S(4, 4)), encodeSafetensors([]));
    expectFailure(() => openHfWeights(dir), ErrorCode.INTEGRITY_FAILED, `${S(4, 4)} is a shard the index does not name`);
  });
  it.each([['../secret.safetensors'], ['/etc/x.safetensors'], ['model.bin'], [3]])(
    'a weight_map entry %j outside the directory or not safetensors',
    (shard) => {
      const dir = sharded();
      writeIndex(dir, { weight_map: { a: shard } });
      expectFailure(
        () => openHfWeights(dir),
        ErrorCode.INTEGRITY_FAILED,
        HF_WEIGHTS_INDEX,
        'weight_map["a"] must be a .safetensors file name in the same directory',
      );
    },
  );
  it('an index that is not JSON or has no weight_map', () => {
    const dir = sharded();
    fs.writeFileSync(path.join(dir, HF_WEIGHTS_INDEX), '{"weight_map": ');
    expectFailure(() => openHfWeights(dir), ErrorCode.INTEGRITY_FAILED, HF_WEIGHTS_INDEX, 'index is not readable JSON');
    writeIndex(dir, { metadata: {} });
    expectFailure(() => openHfWeights(dir), ErrorCode.INTEGRITY_FAILED, 'weight_map is missing');
  });
  it('a truncated shard, naming the shard file and tensor', () => {
    const dir = sharded();
    const file = path.join(dir, S(2, 3));
    fs.truncateSync(file, fs.statSync(file).size - 4);
    expectFailure(() => openHfWeights(dir), ErrorCode.INTEGRITY_FAILED, file, 'tensor "d"', 'truncated (4 bytes missing)');
  });
});

describe('cross-check with Python safetensors / huggingface_hub / transformers', () => {
  it.each([
    ['F32', 24],
    ['BF16', 12],
  ] as const)('a %s directory we sharded loads shard by shard and is split as huggingface_hub splits it', (dtype, max) => {
    const dir = freshDir();
    saveHfWeights(dir, MODEL, { maxShardBytes: max, dtype });
    const order = path.join(root, `order-${count++}.json`);
    fs.writeFileSync(order, JSON.stringify(MODEL.map((t) => t.name)));
    const r = spawnSync('python3', [REFERENCE, 'check-dir', dir, order, String(max)], { encoding: 'utf8', maxBuffer: 64 * 2 ** 20, timeout: 100_000 });
    if (r.status !== 0) {
      throw new Error(
        `Python reference (safetensors, torch, huggingface_hub) failed: ${r.error?.message ?? r.stderr.trim().split('\n').slice(-3).join(' | ')}. Install it with: ${INSTALL}`,
      );
    }
    const report = JSON.parse(r.stdout) as {
      errors: string[];
      shards: string[];
      transformers_loaded: boolean;
      values: Record<string, number[]>;
      dtypes: Record<string, string>;
    };
    expect(report.errors).toEqual([]);
    expect(report.shards).toEqual([S(1, 3), S(2, 3), S(3, 3)]);
    const w = openHfWeights(dir);
    for (const t of MODEL) {
      expect(report.dtypes[t.name]).toBe(dtype);
      expect(report.values[t.name]).toEqual(Array.from(new Uint32Array(readHfTensor(w, t.name).data.buffer)));
    }
    expect(typeof report.transformers_loaded).toBe('boolean');
  });
});
