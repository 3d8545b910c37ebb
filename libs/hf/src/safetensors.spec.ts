import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ErrorCode, SrpoError } from '@srpo/core';
import {
  decodeSafetensorsTensor,
  encodeSafetensors,
  f16BitsToF32Bits,
  f32BitsToBf16Bits,
  f32BitsToF16Bits,
  parseSafetensorsHeader,
  readSafetensorsHeader,
  readSafetensorsTensor,
  writeSafetensors,
  type SafetensorsTensorInput,
} from './safetensors';

const FILE = 'model-00002-of-00002.safetensors';
const REFERENCE = path.join(__dirname, 'safetensors-reference.py');
const INSTALL = 'python3 -m pip install -r scripts/reference/requirements.txt';

/** A file image: 8-byte length (or `length` when forging one), the header text, then `data` bytes. */
function image(header: string | object, data: number | Uint8Array = 0, length?: bigint): Uint8Array {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header), 'utf8');
  const body = typeof data === 'number' ? new Uint8Array(data) : data;
  const out = new Uint8Array(8 + json.length + body.length);
  new DataView(out.buffer).setBigUint64(0, length ?? BigInt(json.length), true);
  out.set(json, 8);
  out.set(body, 8 + json.length);
  return out;
}

const f32 = (shape: number[], begin: number, end: number) => ({ dtype: 'F32', shape, data_offsets: [begin, end] });

function expectFailure(run: () => unknown, code: ErrorCode, ...parts: string[]): SrpoError {
  let caught: unknown;
  try {
    run();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(SrpoError);
  const error = caught as SrpoError;
  expect(error.code).toBe(code);
  for (const part of parts) expect(error.message).toContain(part);
  return error;
}

const bitsOf = (a: Float32Array): number[] => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));
const fromBits = (bits: number[]): Float32Array => new Float32Array(new Uint32Array(bits).buffer);
const isNaNBits32 = (b: number) => (b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0;

let tmp: string;
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'safetensors-spec-'));
});
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe('parseSafetensorsHeader refuses corrupt files with a typed error naming file, tensor and field', () => {
  const parse = (bytes: Uint8Array) => () => parseSafetensorsHeader(bytes, FILE);
  const I = ErrorCode.INTEGRITY_FAILED;

  it('a file shorter than the length prefix', () => void expectFailure(parse(new Uint8Array(5)), I, FILE, 'header length', '5 bytes'));
  it('a header length below 2', () => void expectFailure(parse(image('{', 0, 1n)), I, FILE, 'header length 1 is too small'));
  it('a header length of 2^60, before allocating anything', () => {
    expectFailure(parse(image('{}', 0, 2n ** 60n)), I, FILE, `header length ${2n ** 60n} exceeds the 100000000-byte limit`);
  });
  it('a header length of 2^64 - 1', () => void expectFailure(parse(image('{}', 0, 2n ** 64n - 1n)), I, `${2n ** 64n - 1n} exceeds`));
  it('a header length just over the 100 MB limit', () =>
    void expectFailure(parse(image('{}', 0, 100_000_001n)), I, '100000001 exceeds the 100000000-byte limit'));
  it('a header length past the end of the file', () => {
    expectFailure(parse(image('{}', 0, 40n)), I, FILE, 'header length 40 exceeds the 2 bytes after the length prefix: the file is truncated');
  });
  it('a header with invalid UTF-8 bytes', () => {
    const bytes = image('{ }');
    bytes[9] = 0xff;
    expectFailure(parse(bytes), I, FILE, 'header is not valid UTF-8');
  });
  it('a header that is not JSON', () => void expectFailure(parse(image('{"a":')), I, FILE, 'header is not valid JSON'));
  it('a header with a byte-order mark (the reference refuses it too)', () => void expectFailure(parse(image('\ufeff{}')), I, 'not valid JSON'));
  it('a header that is a JSON array', () => void expectFailure(parse(image('[]')), I, FILE, 'header must be a JSON object'));
  it('__metadata__ that is not an object', () =>
    void expectFailure(parse(image({ __metadata__: 'pt' })), I, FILE, '__metadata__ must be an object of strings'));
  it('__metadata__ with a non-string value', () =>
    void expectFailure(parse(image({ __metadata__: { epoch: 3 } })), I, FILE, '__metadata__.epoch must be a string, got 3'));
  it('a tensor entry that is not an object', () => void expectFailure(parse(image({ w: [1] })), I, FILE, 'tensor "w": entry must be an object'));
  it('a tensor entry without a shape', () => {
    const e = expectFailure(parse(image({ w: { dtype: 'F32', data_offsets: [0, 0] } })), I, FILE, 'tensor "w": shape is missing');
    expect(e.field).toBe('tensors["w"].shape');
  });
  it('a tensor entry with an extra field', () => {
    expectFailure(parse(image({ w: { ...f32([1], 0, 4), offsets: [0, 4] } }, 4)), I, 'tensor "w": "offsets" is not a tensor field');
  });
  it('a dtype that is not a string', () =>
    void expectFailure(parse(image({ w: { ...f32([1], 0, 4), dtype: 7 } }, 4)), I, 'tensor "w": dtype must be a string, got 7'));
  it.each(['F64', 'I64', 'BOOL', 'F8_E4M3', 'U8'])('the valid but unsupported dtype %s', (dtype) => {
    const e = expectFailure(
      parse(image({ 'lm_head.weight': { dtype, shape: [1], data_offsets: [0, 8] } }, 8)),
      ErrorCode.VALIDATION_FAILED,
      FILE,
      'tensor "lm_head.weight"',
      `dtype unsupported dtype ${dtype} (supported: F32, F16, BF16)`,
    );
    expect(e.field).toBe('tensors["lm_head.weight"].dtype');
  });
  it.each([[[-1]], [[1.5]], ['4'], [[2 ** 53]], [null]])('the shape %j', (shape) => {
    expectFailure(parse(image({ w: { dtype: 'F32', shape, data_offsets: [0, 4] } }, 4)), I, 'tensor "w": shape must be an array of non-negative integers');
  });
  it.each([[[0]], [[0, 4, 8]], [[-4, 0]], [[0, 4.5]], ['0,4']])('the data_offsets %j', (offsets) => {
    expectFailure(parse(image({ w: { dtype: 'F32', shape: [1], data_offsets: offsets } }, 4)), I, 'tensor "w": data_offsets must be two non-negative integers');
  });
  it('data_offsets with begin after end', () => {
    const name = 'model.layers.1.mlp.up_proj.weight';
    const e = expectFailure(parse(image({ [name]: f32([0], 100, 90) }, 100)), I, `${FILE}: tensor "${name}": data_offsets [100, 90]: begin is after end`);
    expect(e.field).toBe(`tensors["${name}"].data_offsets`);
  });
  it('data_offsets whose span does not match shape and dtype', () => {
    expectFailure(
      parse(image({ w: { dtype: 'F16', shape: [3], data_offsets: [0, 8] } }, 8)),
      I,
      'tensor "w": data_offsets [0, 8] span 8 bytes but shape [3] of F16 needs 6',
    );
  });
  it('a shape whose element count overflows 2^64 (no wrap-around)', () => {
    expectFailure(parse(image({ w: f32([2 ** 40, 2 ** 40, 2 ** 40], 0, 0) })), I, `needs ${2n ** 122n}`);
  });
  it('a truncated file, saying how many bytes are missing', () => {
    const header = { a: f32([2], 0, 8), b: f32([4], 8, 24) };
    expectFailure(
      parse(image(header, 10)),
      I,
      FILE,
      'tensor "b": data_offsets [8, 24] end beyond the 10-byte data buffer: the file is truncated (14 bytes missing)',
    );
  });
  it('overlapping tensors', () => {
    expectFailure(parse(image({ a: f32([2], 0, 8), b: f32([1], 4, 8) }, 8)), I, 'tensor "b": data_offsets [4, 8] overlap tensor "a" at [0, 8]');
  });
  it('a gap between tensors, naming the first unused bytes', () => {
    expectFailure(
      parse(image({ b: f32([1], 12, 16), a: f32([1], 0, 4), c: f32([1], 4, 8) }, 16)),
      I,
      'tensor "b": data_offsets [12, 16] leave bytes [8, 12) of the data buffer unused',
    );
  });
  it('a data buffer that does not start with a tensor', () => void expectFailure(parse(image({ a: f32([1], 4, 8) }, 8)), I, 'tensor "a"', 'bytes [0, 4)'));
  it('bytes after the last tensor', () => {
    expectFailure(parse(image({ a: f32([1], 0, 4) }, 12)), I, FILE, 'data buffer has 8 bytes after the last tensor (tensors end at 4 of 12)');
  });
});

describe('parseSafetensorsHeader accepts what the reference accepts', () => {
  it('reads dtypes, shapes, offsets and metadata; empty and scalar tensors; leading and padding spaces', () => {
    const header = {
      __metadata__: { format: 'pt' },
      s: { dtype: 'BF16', shape: [], data_offsets: [8, 10] },
      e: { dtype: 'F16', shape: [0, 3], data_offsets: [8, 8] },
      w: f32([2], 0, 8),
    };
    const h = parseSafetensorsHeader(image(` ${JSON.stringify(header)}   `, 10), FILE);
    expect(h.metadata).toEqual({ format: 'pt' });
    expect(h.tensors.get('s')).toEqual({ name: 's', dtype: 'BF16', shape: [], begin: 8, end: 10 });
    expect(h.tensors.get('e')).toEqual({ name: 'e', dtype: 'F16', shape: [0, 3], begin: 8, end: 8 });
    expect(h.dataOffset).toBe(8 + JSON.stringify(header).length + 4);
    expect(h.fileSize).toBe(h.dataOffset + 10);
    expect(parseSafetensorsHeader(image('{}'), FILE).tensors.size).toBe(0);
  });
});

describe('float16 / bfloat16 conversions (expected bits checked with numpy and torch)', () => {
  const f32bits = (x: number) => new Uint32Array(new Float32Array([x]).buffer)[0];
  it.each([
    [1, 0x3c00],
    [-2, 0xc000],
    [65504, 0x7bff],
    [65519, 0x7bff],
    [65520, 0x7c00],
    [1e6, 0x7c00],
    [-Infinity, 0xfc00],
    [-0, 0x8000],
    [2 ** -24, 0x0001],
    [2 ** -25, 0x0000],
    [1.5 * 2 ** -25, 0x0001],
    [3 * 2 ** -25, 0x0002],
    [2 ** -14, 0x0400],
    [2 ** -14 - 2 ** -25, 0x0400],
    [1 + 2 ** -11, 0x3c00],
    [1 + 3 * 2 ** -11, 0x3c02],
    [1 + 2 ** -11 + 2 ** -20, 0x3c01],
  ])('f32 %p → f16 bits %p (round to nearest, ties to even)', (x, h) => expect(f32BitsToF16Bits(f32bits(x))).toBe(h));
  it('f32 subnormals and NaNs → f16', () => {
    expect([0x00000001, 0x80000001, 0x7fc00000, 0x7f800001, 0xffc00000].map(f32BitsToF16Bits)).toEqual([0x0000, 0x8000, 0x7e00, 0x7e00, 0xfe00]);
  });
  it('f16 → f32 exactly, subnormals, inf and NaN payloads included', () => {
    const h = [0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x8000, 0x3555];
    expect(h.map(f16BitsToF32Bits)).toEqual([
      0x33800000, 0x387fc000, 0x38800000, 0x477fe000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f802000, 0x80000000, 0x3eaaa000,
    ]);
  });
  it('f32 → bf16 rounds to nearest, ties to even; overflow to inf; NaN stays NaN', () => {
    const cases = [
      [0x3f800000, 0x3f80],
      [0x3f808000, 0x3f80],
      [0x3f818000, 0x3f82],
      [0x3f808001, 0x3f81],
      [0x7f7fffff, 0x7f80],
      [0xff7fffff, 0xff80],
      [0x7f7f7fff, 0x7f7f],
      [0x00000001, 0x0000],
      [0x00008000, 0x0000],
      [0x00018000, 0x0002],
      [0x7f800000, 0x7f80],
      [0x7fc00000, 0x7fc0],
      [0x7f800001, 0x7fc0],
      [0xffc00001, 0xffc0],
    ];
    expect(cases.map(([b]) => f32BitsToBf16Bits(b))).toEqual(cases.map(([, h]) => h));
  });
  it('every f16 pattern survives f16 → f32 → f16, and every non-NaN bf16 pattern bf16 → f32 → bf16', () => {
    const bad: string[] = [];
    for (let h = 0; h < 65536; h++) {
      const nan16 = (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
      if (f32BitsToF16Bits(f16BitsToF32Bits(h)) !== (nan16 ? h | 0x200 : h)) bad.push(`f16 ${h.toString(16)}`);
      const nanBf = (h & 0x7f80) === 0x7f80 && (h & 0x7f) !== 0;
      if (f32BitsToBf16Bits((h << 16) >>> 0) !== (nanBf ? h | 0x40 : h)) bad.push(`bf16 ${h.toString(16)}`);
    }
    expect(bad).toEqual([]);
  });
});

describe('encodeSafetensors', () => {
  it("writes the reference implementation's bytes (golden from the Rust crate's test_serialization tests)", () => {
    const data = new Float32Array([0, 1, 2, 3, 4, 5]);
    const out = encodeSafetensors([{ name: 'attn.0', shape: [1, 2, 3], data }]);
    const json = '{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}';
    expect([...out]).toEqual([64, 0, 0, 0, 0, 0, 0, 0, ...Buffer.from(json), ...new Uint8Array(data.buffer)]);
    const padded = encodeSafetensors([{ name: 'attn0', shape: [1, 1, 2, 3], data }]);
    expect(padded.readBigUInt64LE(0)).toBe(72n);
    expect(padded.subarray(8, 80).toString()).toBe(`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}${' '.repeat(7)}`);
    expect([...encodeSafetensors([], { framework: 'pt' })].slice(0, 8)).toEqual([40, 0, 0, 0, 0, 0, 0, 0]);
  });
  it('orders tensors like Python: F32 before BF16 before F16, then by name; metadata first', () => {
    const t = (name: string, dtype: 'F32' | 'F16' | 'BF16') => ({ name, shape: [1], data: new Float32Array([1]), dtype });
    const out = encodeSafetensors([t('b', 'F16'), t('c', 'F32'), t('z', 'BF16'), t('a', 'F32')], { z: '1', format: 'np' });
    const h = out
      .subarray(8, 8 + Number(out.readBigUInt64LE(0)))
      .toString()
      .trimEnd();
    expect(h).toBe(
      '{"__metadata__":{"format":"np","z":"1"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"c":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},' +
        '"z":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]},"b":{"dtype":"F16","shape":[1],"data_offsets":[10,12]}}',
    );
    expect(out.readBigUInt64LE(0) % 8n).toBe(0n);
  });
  it.each(['F32', 'F16', 'BF16'] as const)('round-trips %s through parse and decode', (dtype) => {
    const special = [0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x33800000, 0x477fe000, 0x3f808000, 0x3eaaa000];
    const data = fromBits(special);
    const bytes = encodeSafetensors([
      { name: 'x', shape: [3, 3], data, dtype },
      { name: 'e', shape: [0], data: new Float32Array(0), dtype },
    ]);
    const header = parseSafetensorsHeader(bytes, 'mem');
    const back = bitsOf(decodeSafetensorsTensor(header, 'x', bytes));
    const narrow =
      dtype === 'F16'
        ? (b: number) => f16BitsToF32Bits(f32BitsToF16Bits(b))
        : dtype === 'BF16'
          ? (b: number) => (f32BitsToBf16Bits(b) << 16) >>> 0
          : (b: number) => b;
    expect(back).toEqual(special.map(narrow));
    if (dtype !== 'F32') expect(back.slice(0, 6)).toEqual(special.slice(0, 6)); // exactly representable in both
    expect(decodeSafetensorsTensor(header, 'e', bytes).length).toBe(0);
  });
  it.each<[string, SafetensorsTensorInput[], string]>([
    [
      'a shape that does not match the data',
      [{ name: 'w', shape: [2, 2], data: new Float32Array(3) }],
      'tensor "w": shape [2,2] has 4 elements but data has 3',
    ],
    [
      'a duplicate name',
      [
        { name: 'w', shape: [1], data: new Float32Array(1) },
        { name: 'w', shape: [1], data: new Float32Array(1) },
      ],
      'tensor "w": name appears twice',
    ],
    ['the reserved name __metadata__', [{ name: '__metadata__', shape: [1], data: new Float32Array(1) }], '"__metadata__" cannot name a tensor'],
    ['an unsupported dtype', [{ name: 'w', shape: [1], data: new Float32Array(1), dtype: 'F64' as 'F32' }], 'tensor "w": dtype unsupported dtype "F64"'],
  ])('refuses %s', (_, tensors, message) => void expectFailure(() => encodeSafetensors(tensors), ErrorCode.VALIDATION_FAILED, message));
  it('refuses non-string metadata', () => {
    expectFailure(() => encodeSafetensors([], { step: 3 as unknown as string }), ErrorCode.VALIDATION_FAILED, '__metadata__.step must be a well-formed string');
  });
});

describe('files', () => {
  it('writeSafetensors writes atomically and readSafetensorsTensor reads values back; bad input leaves the old file', () => {
    const file = path.join(tmp, 'w.safetensors');
    const data = new Float32Array([1.5, -2, 3.25, 1e-3]);
    writeSafetensors(file, [{ name: 'w', shape: [2, 2], data, dtype: 'BF16' }], { format: 'pt' });
    writeSafetensors(file, [{ name: 'w', shape: [2, 2], data }], { format: 'pt' });
    const before = fs.readFileSync(file);
    expectFailure(() => writeSafetensors(file, [{ name: 'w', shape: [3], data }]), ErrorCode.VALIDATION_FAILED, file, 'tensor "w"');
    expect(fs.readFileSync(file).equals(before)).toBe(true);
    expect(fs.readdirSync(tmp).filter((f) => f.includes('tmp'))).toEqual([]);
    const header = readSafetensorsHeader(file);
    expect(header.metadata).toEqual({ format: 'pt' });
    expect(bitsOf(readSafetensorsTensor(header, 'w'))).toEqual(bitsOf(data));
    expectFailure(() => readSafetensorsTensor(header, 'nope'), ErrorCode.NOT_FOUND, file, 'tensor "nope" is not in this file (1 tensors)');
    fs.appendFileSync(file, Buffer.alloc(4));
    expectFailure(() => readSafetensorsTensor(header, 'w'), ErrorCode.INTEGRITY_FAILED, file, 'the file changed');
  });
  it('readSafetensorsHeader names missing files and directories', () => {
    expectFailure(() => readSafetensorsHeader(path.join(tmp, 'absent.safetensors')), ErrorCode.NOT_FOUND, 'absent.safetensors: no such file');
    expectFailure(() => readSafetensorsHeader(tmp), ErrorCode.NOT_FOUND, 'is not a regular file');
  });
  it('readSafetensorsHeader refuses a forged 2^60 header length and a truncated file on disk', () => {
    const forged = path.join(tmp, 'forged.safetensors');
    fs.writeFileSync(forged, image('{}', 0, 2n ** 60n));
    expectFailure(() => readSafetensorsHeader(forged), ErrorCode.INTEGRITY_FAILED, forged, 'exceeds the 100000000-byte limit');
    const cut = path.join(tmp, 'cut.safetensors');
    const whole = encodeSafetensors([{ name: 'w', shape: [4], data: new Float32Array(4) }]);
    fs.writeFileSync(cut, whole.subarray(0, whole.length - 6));
    expectFailure(() => readSafetensorsHeader(cut), ErrorCode.INTEGRITY_FAILED, cut, 'tensor "w"', 'truncated (6 bytes missing)');
  });
  it('reads the header and one small tensor of a 5 GiB (sparse) file without reading the rest', () => {
    const file = path.join(tmp, 'big.safetensors');
    const big = 5 * 2 ** 30;
    const head = image({ a: f32([2], 0, 8), big: f32([big / 4], 8, 8 + big) }, new Uint8Array(new Float32Array([7, -1]).buffer));
    fs.writeFileSync(file, head);
    fs.truncateSync(file, head.length + big);
    const header = readSafetensorsHeader(file);
    expect(header.fileSize).toBe(head.length + big);
    expect(Array.from(readSafetensorsTensor(header, 'a'))).toEqual([7, -1]);
  });
});

interface PyTensor {
  dtype: string;
  shape: number[];
  f32bits: number[];
  stored?: number[];
  torch_f16?: number[];
  torch_bf16?: number[];
}
interface PyFile {
  metadata: Record<string, string>;
  tensors: Record<string, PyTensor>;
}

/** Runs the reference script; a missing Python stack fails the test with the install command. */
function python<T>(...args: string[]): T {
  const r = spawnSync('python3', [REFERENCE, ...args], { encoding: 'utf8', maxBuffer: 256 * 2 ** 20, timeout: 100_000 });
  if (r.status !== 0) {
    throw new Error(
      `Python reference (safetensors, numpy, torch) failed: ${r.error?.message ?? r.stderr.trim().split('\n').slice(-3).join(' | ')}. ` +
        `Install it with: ${INSTALL}`,
    );
  }
  return JSON.parse(r.stdout) as T;
}

/** Same bits, except that any NaN matches any NaN (torch canonicalises NaNs, payloads differ by library). */
const sameValues16or32 = (a: number[], b: number[], isNaN: (x: number) => boolean) =>
  a.length === b.length && a.every((x, i) => x === b[i] || (isNaN(x) && isNaN(b[i])));

describe('cross-check with the Python safetensors library', () => {
  it('our reader reads exactly what Python safetensors.torch.save_file wrote (all 65536 F16 and BF16 patterns)', () => {
    const file = path.join(tmp, 'python.safetensors');
    const expected = python<PyFile>('write', file);
    const header = readSafetensorsHeader(file);
    expect(header.metadata).toEqual(expected.metadata);
    expect([...header.tensors.keys()].sort()).toEqual(Object.keys(expected.tensors).sort());
    for (const [name, t] of Object.entries(expected.tensors)) {
      const info = header.tensors.get(name);
      expect({ name, dtype: info?.dtype, shape: info?.shape }).toEqual({ name, dtype: t.dtype, shape: t.shape });
      expect({ name, bits: bitsOf(readSafetensorsTensor(header, name)) }).toEqual({ name, bits: t.f32bits });
    }
    expect(expected.tensors['all.f16'].f32bits.length).toBe(65536);
  });

  it("Python safe_open loads what our writer wrote: same metadata, dtypes, shapes, values, and torch's own f16/bf16 rounding", () => {
    const values = [
      0,
      -0,
      1,
      -2.5,
      65504,
      65519,
      65520,
      1e6,
      -Infinity,
      Infinity,
      NaN,
      2 ** -24,
      2 ** -25,
      1.5 * 2 ** -25,
      3 * 2 ** -25,
      2 ** -14 - 2 ** -25,
      1 + 2 ** -11,
      1 + 3 * 2 ** -11,
      1 + 2 ** -8,
      1 + 3 * 2 ** -8,
      3.3895313892515355e38,
      3.4e38,
      1e-40,
      -1e-45,
      Math.PI,
    ];
    let seed = 12345;
    for (let i = 0; i < 200; i++) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      values.push((seed / 2 ** 31 - 0.5) * 2 ** ((i % 40) - 20));
    }
    const data = new Float32Array(values);
    const metadata = { format: 'pt', note: 'quotes " and \\ and\nnewline', unicode: 'üñí ✓ 😀' };
    const file = path.join(tmp, 'ours.safetensors');
    const shape = [data.length];
    writeSafetensors(
      file,
      [
        { name: 'x.f32', shape, data },
        { name: 'x.f16', shape, data, dtype: 'F16' },
        { name: 'x.bf16', shape, data, dtype: 'BF16' },
        { name: 'scalar', shape: [], data: new Float32Array([-7]) },
        { name: 'empty', shape: [2, 0], data: new Float32Array(0), dtype: 'BF16' },
      ],
      metadata,
    );
    const py = python<PyFile>('read', file);
    expect(py.metadata).toEqual(metadata);
    const t = py.tensors;
    expect(Object.fromEntries(Object.entries(t).map(([k, v]) => [k, [v.dtype, v.shape]]))).toEqual({
      'x.f32': ['F32', shape],
      'x.f16': ['F16', shape],
      'x.bf16': ['BF16', shape],
      scalar: ['F32', []],
      empty: ['BF16', [2, 0]],
    });
    expect(t['x.f32'].stored).toEqual(bitsOf(data));
    const nan16 = (h: number) => (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
    const nanBf = (h: number) => (h & 0x7f80) === 0x7f80 && (h & 0x7f) !== 0;
    expect(sameValues16or32(t['x.f16'].stored ?? [], t['x.f32'].torch_f16 ?? [], nan16)).toBe(true);
    expect(sameValues16or32(t['x.bf16'].stored ?? [], t['x.f32'].torch_bf16 ?? [], nanBf)).toBe(true);
    const header = readSafetensorsHeader(file);
    for (const name of ['x.f16', 'x.bf16', 'scalar']) {
      expect(sameValues16or32(bitsOf(readSafetensorsTensor(header, name)), t[name].f32bits, isNaNBits32)).toBe(true);
    }
    expect(t.scalar.f32bits).toEqual(bitsOf(new Float32Array([-7])));
  });
});
