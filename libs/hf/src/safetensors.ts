/**
 * Reading and writing safetensors files (https://huggingface.co/docs/safetensors) without
 * trusting them: an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
 * data buffer. Every field of a header is checked before a byte of tensor data is allocated,
 * because these files come from the network and a header length of 2^60 or an offset past the
 * end must be a typed error naming the file, tensor and field, never a crash or a huge
 * allocation. The checks follow the reference (Rust) implementation, which Python's
 * `safetensors` uses: header ≤ 100 000 000 bytes; tensors, sorted by offsets, cover the data
 * buffer contiguously from 0 to its end (no gaps, no overlaps, no trailing bytes). This reader
 * is stricter in one place, on purpose: a tensor entry must have exactly
 * `dtype`/`shape`/`data_offsets` (the reference ignores unknown fields).
 *
 * Only F32, F16 and BF16 are supported; values are always handed out as float32 (F16 and
 * BF16 widen exactly), which is what the policy math uses.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TextDecoder } from 'node:util';
import { ErrorCode, SrpoError, errorMessage } from '@srpo/core';

export type SafetensorsDtype = 'F32' | 'F16' | 'BF16';
export const SAFETENSORS_DTYPES: readonly SafetensorsDtype[] = ['F32', 'F16', 'BF16'];
/** The reference implementation's MAX_HEADER_SIZE; a larger header is refused, as there. */
export const SAFETENSORS_MAX_HEADER_BYTES = 100_000_000;
export const SAFETENSORS_ITEM_BYTES: Readonly<Record<SafetensorsDtype, number>> = { F32: 4, F16: 2, BF16: 2 };
/** Position in the Rust `Dtype` enum (declared in increasing alignment); its writer sorts descending. */
const DTYPE_RANK: Readonly<Record<SafetensorsDtype, number>> = { F16: 0, BF16: 1, F32: 2 };
const FIELDS = ['dtype', 'shape', 'data_offsets'] as const;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
/** Largest single read or write: the kernel caps one call near 2 GiB. */
const CHUNK = 2 ** 30;

export interface SafetensorsTensorInfo {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  /** Byte offsets relative to the start of the data buffer (`dataOffset` in the file). */
  begin: number;
  end: number;
}

export interface SafetensorsHeader {
  /** The path (or label) every error message names. */
  file: string;
  metadata?: Record<string, string>;
  tensors: Map<string, SafetensorsTensorInfo>;
  /** Absolute file offset of the data buffer: 8 + header length. */
  dataOffset: number;
  fileSize: number;
}

export interface SafetensorsTensorInput {
  name: string;
  shape: readonly number[];
  data: Float32Array;
  /** Stored dtype; default F32 (or the caller's default, see `saveHfWeights`). */
  dtype?: SafetensorsDtype;
}

/** `file: tensor "name": field problem` — names the tensor (JSON-quoted, so control characters cannot forge log lines) and field. */
function fail(code: ErrorCode, file: string, field: string, problem: string, tensor?: string, cause?: unknown): SrpoError {
  const where = tensor === undefined ? '' : ` tensor ${JSON.stringify(tensor)}:`;
  const dotted = tensor === undefined ? field : `tensors[${JSON.stringify(tensor)}].${field}`;
  return new SrpoError(code, `${file}:${where} ${field} ${problem}`, { field: dotted, cause, details: { file, tensor } });
}

const corrupt = (file: string, field: string, problem: string, tensor?: string) => fail(ErrorCode.INTEGRITY_FAILED, file, field, problem, tensor);

/** A short rendering of an untrusted JSON value for a message (never the whole of a huge array). */
function show(value: unknown): string {
  const s = value === undefined ? 'undefined' : JSON.stringify(value);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const hasOwn = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k);
const isDtype = (v: unknown): v is SafetensorsDtype => typeof v === 'string' && (SAFETENSORS_DTYPES as readonly string[]).includes(v);
/** Lone UTF-16 surrogates cannot be encoded as UTF-8, so the reference reader refuses such names. */
const wellFormed = (s: string): boolean => !/\p{Cs}/u.test(s);
const isCounts = (v: unknown): v is number[] => Array.isArray(v) && v.every((d) => Number.isSafeInteger(d) && d >= 0);

/** Checks the 8-byte length prefix against the limits, before anything is allocated for the header. */
function headerLength(prefix: Uint8Array, fileSize: number, file: string): number {
  if (fileSize < 8 || prefix.length < 8)
    throw corrupt(file, 'header length', `is missing: the file has ${fileSize} bytes, fewer than the 8-byte length prefix`);
  const n = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (n < 2n) throw corrupt(file, 'header length', `${n} is too small for a JSON object (at least 2 bytes)`);
  if (n > BigInt(SAFETENSORS_MAX_HEADER_BYTES))
    throw corrupt(file, 'header length', `${n} exceeds the ${SAFETENSORS_MAX_HEADER_BYTES}-byte limit: the file is corrupt`);
  if (n > BigInt(fileSize - 8)) throw corrupt(file, 'header length', `${n} exceeds the ${fileSize - 8} bytes after the length prefix: the file is truncated`);
  return Number(n);
}

function checkTensor(name: string, entry: unknown, file: string): SafetensorsTensorInfo {
  if (!wellFormed(name)) throw corrupt(file, 'name', 'contains a lone UTF-16 surrogate', name);
  if (!isObject(entry)) throw corrupt(file, 'entry', `must be an object with dtype, shape and data_offsets, got ${show(entry)}`, name);
  const extra = Object.keys(entry).find((key) => !(FIELDS as readonly string[]).includes(key));
  if (extra !== undefined) throw corrupt(file, JSON.stringify(extra), 'is not a tensor field (expected exactly dtype, shape, data_offsets)', name);
  for (const key of FIELDS) if (!hasOwn(entry, key)) throw corrupt(file, key, 'is missing', name);
  const { dtype, shape, data_offsets: offsets } = entry;
  if (typeof dtype !== 'string') throw corrupt(file, 'dtype', `must be a string, got ${show(dtype)}`, name);
  if (!isDtype(dtype)) {
    throw fail(ErrorCode.VALIDATION_FAILED, file, 'dtype', `unsupported dtype ${show(dtype).slice(1, -1)} (supported: ${SAFETENSORS_DTYPES.join(', ')})`, name);
  }
  if (!isCounts(shape)) throw corrupt(file, 'shape', `must be an array of non-negative integers, got ${show(shape)}`, name);
  if (!isCounts(offsets) || offsets.length !== 2)
    throw corrupt(file, 'data_offsets', `must be two non-negative integers [begin, end], got ${show(offsets)}`, name);
  const [begin, end] = offsets;
  if (begin > end) throw corrupt(file, 'data_offsets', `[${begin}, ${end}]: begin is after end`, name);
  // BigInt: a shape like [2^40, 2^40] must not wrap around or lose precision.
  const elements = shape.reduce((p, d) => p * BigInt(d), 1n);
  const need = elements * BigInt(SAFETENSORS_ITEM_BYTES[dtype]);
  if (need !== BigInt(end - begin))
    throw corrupt(file, 'data_offsets', `[${begin}, ${end}] span ${end - begin} bytes but shape ${show(shape)} of ${dtype} needs ${need}`, name);
  return { name, dtype, shape: [...shape], begin, end };
}

/** Truncation, overlaps, gaps and trailing bytes, in file order (the reference sorts by offsets too). */
function checkLayout(infos: SafetensorsTensorInfo[], dataSize: number, file: string): void {
  const sorted = [...infos].sort((a, b) => a.begin - b.begin || a.end - b.end || (a.name < b.name ? -1 : 1));
  const maxEnd = sorted.reduce((m, t) => Math.max(m, t.end), 0);
  const first = sorted.find((t) => t.end > dataSize);
  if (first)
    throw corrupt(
      file,
      'data_offsets',
      `[${first.begin}, ${first.end}] end beyond the ${dataSize}-byte data buffer: the file is truncated (${maxEnd - dataSize} bytes missing)`,
      first.name,
    );
  let pos = 0;
  let prev: SafetensorsTensorInfo | undefined;
  for (const t of sorted) {
    const at = `[${t.begin}, ${t.end}]`;
    if (t.begin < pos && prev) throw corrupt(file, 'data_offsets', `${at} overlap tensor ${JSON.stringify(prev.name)} at [${prev.begin}, ${prev.end}]`, t.name);
    if (t.begin > pos)
      throw corrupt(file, 'data_offsets', `${at} leave bytes [${pos}, ${t.begin}) of the data buffer unused: tensors must cover it contiguously`, t.name);
    pos = t.end;
    prev = t;
  }
  if (pos < dataSize)
    throw corrupt(
      file,
      'data buffer',
      `has ${dataSize - pos} bytes after the last tensor (tensors end at ${pos} of ${dataSize}): tensors must cover it contiguously`,
    );
}

/** Parses the N header bytes; `fileSize` is the size of the whole file they came from. */
function parseHeaderJson(json: Uint8Array, fileSize: number, file: string): SafetensorsHeader {
  let root: unknown;
  try {
    // ignoreBOM keeps a BOM in the text so that JSON.parse refuses it, as the reference does.
    root = JSON.parse(new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(json));
  } catch (e) {
    throw corrupt(file, 'header', e instanceof SyntaxError ? `is not valid JSON (${errorMessage(e)})` : 'is not valid UTF-8');
  }
  if (!isObject(root)) throw corrupt(file, 'header', `must be a JSON object, got ${show(root)}`);
  const dataOffset = 8 + json.length;
  const tensors = new Map<string, SafetensorsTensorInfo>();
  let metadata: Record<string, string> | undefined;
  for (const [key, value] of Object.entries(root)) {
    if (key !== '__metadata__') {
      tensors.set(key, checkTensor(key, value, file));
      continue;
    }
    if (!isObject(value)) throw corrupt(file, '__metadata__', `must be an object of strings, got ${show(value)}`);
    for (const [k, v] of Object.entries(value)) {
      if (typeof v !== 'string') throw corrupt(file, `__metadata__.${k}`, `must be a string, got ${show(v)}`);
    }
    // fromEntries defines own properties, so a "__proto__" key stays data.
    metadata = Object.fromEntries(Object.entries(value as Record<string, string>));
  }
  checkLayout([...tensors.values()], fileSize - dataOffset, file);
  return { file, ...(metadata ? { metadata } : {}), tensors, dataOffset, fileSize };
}

/** Parses a header from the bytes of a whole file already in memory (tests, downloaded buffers). */
export function parseSafetensorsHeader(bytes: Uint8Array, file: string): SafetensorsHeader {
  const n = headerLength(bytes, bytes.length, file);
  return parseHeaderJson(bytes.subarray(8, 8 + n), bytes.length, file);
}

function ioError(file: string, e: unknown, doing: string): SrpoError {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') return new SrpoError(ErrorCode.NOT_FOUND, `${file}: no such file`, { cause: e, details: { file } });
  return new SrpoError(ErrorCode.UNAVAILABLE, `${file}: cannot ${doing} (${errorMessage(e)})`, { cause: e, details: { file } });
}

/** Reads `buf.length` bytes at `position`; a short read means the file shrank under us. */
function readFully(fd: number, buf: Uint8Array, position: number, file: string): void {
  let done = 0;
  while (done < buf.length) {
    let n: number;
    try {
      n = fs.readSync(fd, buf, done, Math.min(buf.length - done, CHUNK), position + done);
    } catch (e) {
      throw ioError(file, e, 'read');
    }
    if (n === 0) throw corrupt(file, 'file', `ended at byte ${position + done}, expected ${buf.length - done} more bytes: it changed while being read`);
    done += n;
  }
}

function withFile<T>(file: string, use: (fd: number, size: number) => T): T {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    throw ioError(file, e, 'open');
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new SrpoError(ErrorCode.NOT_FOUND, `${file}: is not a regular file`, { details: { file } });
    return use(fd, stat.size);
  } finally {
    fs.closeSync(fd);
  }
}

/** Reads and checks only the header: a positioned read of 8 bytes, then of the N it announces. */
export function readSafetensorsHeader(file: string): SafetensorsHeader {
  return withFile(file, (fd, size) => {
    const prefix = new Uint8Array(Math.min(8, size));
    readFully(fd, prefix, 0, file);
    const n = headerLength(prefix, size, file);
    const json = new Uint8Array(n);
    readFully(fd, json, 8, file);
    return parseHeaderJson(json, size, file);
  });
}

let f16Table: Uint32Array | undefined;
/** float16 bits → float32 bits, exactly (subnormals normalised; inf and NaN payloads kept). */
export function f16BitsToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0;
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0;
  if (mant === 0) return sign >>> 0;
  const shift = Math.clz32(mant) - 21; // a subnormal is mant · 2^-24: shift its top bit into the implicit-bit position
  return (sign | ((113 - shift) << 23) | (((mant << shift) & 0x3ff) << 13)) >>> 0;
}

/** float32 bits → bfloat16 bits, round to nearest, ties to even; NaN stays NaN (quiet bit forced, sign kept). */
export function f32BitsToBf16Bits(bits: number): number {
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x7fffff) !== 0) return ((bits >>> 16) | 0x40) & 0xffff;
  // Exact in doubles; finite inputs stay below 2^32 (only negative NaNs could reach it).
  return Math.floor(((bits >>> 0) + 0x7fff + ((bits >>> 16) & 1)) / 0x10000) & 0xffff;
}

/** float32 bits → float16 bits, round to nearest, ties to even: overflow goes to ±inf, tiny values to subnormals or ±0; NaN stays NaN. */
export function f32BitsToF16Bits(bits: number): number {
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return mant === 0 ? sign | 0x7c00 : sign | 0x7e00 | (mant >>> 13);
  const e = exp - 127;
  if (e > 15) return sign | 0x7c00;
  if (e >= -14) {
    let m = mant >>> 13;
    const rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest === 0x1000 && (m & 1) === 1)) m += 1;
    return sign | (((e + 15) << 10) + m); // a mantissa carry bumps the exponent, up to inf
  }
  const shift = -e - 1; // in units of 2^-24, the value is (mant | 2^23) · 2^(e+1)
  if (exp === 0 || shift > 24) return sign;
  const sig = mant | 0x800000;
  let q = sig >>> shift;
  const rest = sig & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  if (rest > half || (rest === half && (q & 1) === 1)) q += 1;
  return sign | q;
}

function decode(dtype: SafetensorsDtype, bytes: Uint8Array): Float32Array {
  const n = bytes.length / SAFETENSORS_ITEM_BYTES[dtype];
  const out = new Float32Array(n);
  const bits = new Uint32Array(out.buffer);
  if (dtype === 'F32') {
    if (LITTLE_ENDIAN) new Uint8Array(out.buffer).set(bytes);
    else for (let i = 0; i < n; i++) bits[i] = new DataView(bytes.buffer, bytes.byteOffset).getUint32(4 * i, true);
  } else if (dtype === 'BF16') {
    for (let i = 0; i < n; i++) bits[i] = (bytes[2 * i] | (bytes[2 * i + 1] << 8)) << 16;
  } else {
    if (!f16Table) {
      f16Table = new Uint32Array(65536);
      for (let h = 0; h < 65536; h++) f16Table[h] = f16BitsToF32Bits(h);
    }
    const table = f16Table;
    for (let i = 0; i < n; i++) bits[i] = table[bytes[2 * i] | (bytes[2 * i + 1] << 8)];
  }
  return out;
}

function encode(dtype: SafetensorsDtype, data: Float32Array): Uint8Array {
  if (dtype === 'F32') {
    const out = new Uint8Array(data.byteLength);
    if (LITTLE_ENDIAN) out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    else for (let i = 0; i < data.length; i++) new DataView(out.buffer).setFloat32(4 * i, data[i], true);
    return out;
  }
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length);
  const narrow = dtype === 'BF16' ? f32BitsToBf16Bits : f32BitsToF16Bits;
  const out = new Uint8Array(2 * data.length);
  for (let i = 0; i < data.length; i++) {
    const h = narrow(bits[i]);
    out[2 * i] = h & 0xff;
    out[2 * i + 1] = h >>> 8;
  }
  return out;
}

function tensorInfo(header: SafetensorsHeader, name: string): SafetensorsTensorInfo {
  const info = header.tensors.get(name);
  if (info) return info;
  const problem = `is not in this file (${header.tensors.size} tensors)`;
  throw new SrpoError(ErrorCode.NOT_FOUND, `${header.file}: tensor ${JSON.stringify(name)} ${problem}`, {
    field: name,
    details: { file: header.file, tensor: name },
  });
}

/** A tensor too large for one typed array (a RangeError from V8) becomes a typed error naming it. */
function sized<T>(header: SafetensorsHeader, info: SafetensorsTensorInfo, make: () => T): T {
  try {
    return make();
  } catch (e) {
    if (!(e instanceof RangeError)) throw e;
    throw fail(
      ErrorCode.PAYLOAD_TOO_LARGE,
      header.file,
      'data_offsets',
      `span ${info.end - info.begin} bytes, more than one typed array can hold`,
      info.name,
      e,
    );
  }
}

/** Reads one tensor's values as float32 with a positioned read of just its bytes. */
export function readSafetensorsTensor(header: SafetensorsHeader, name: string): Float32Array {
  const info = tensorInfo(header, name);
  return withFile(header.file, (fd, size) => {
    if (size !== header.fileSize) {
      throw corrupt(header.file, 'file size', `is ${size} bytes but was ${header.fileSize} when its header was read: the file changed`, name);
    }
    const bytes = sized(header, info, () => new Uint8Array(info.end - info.begin));
    readFully(fd, bytes, header.dataOffset + info.begin, header.file);
    return sized(header, info, () => decode(info.dtype, bytes));
  });
}

/** Like {@link readSafetensorsTensor}, from the whole file's bytes in memory (as given to {@link parseSafetensorsHeader}). */
export function decodeSafetensorsTensor(header: SafetensorsHeader, name: string, fileBytes: Uint8Array): Float32Array {
  const info = tensorInfo(header, name);
  if (fileBytes.length !== header.fileSize)
    throw corrupt(header.file, 'file size', `is ${fileBytes.length} bytes but the header was parsed from ${header.fileSize}`, name);
  return decode(info.dtype, fileBytes.subarray(header.dataOffset + info.begin, header.dataOffset + info.end));
}

interface Planned {
  name: string;
  dtype: SafetensorsDtype;
  shape: readonly number[];
  data: Float32Array;
  begin: number;
  end: number;
}

const utf8Compare = (a: string, b: string): number => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

/**
 * Throws a VALIDATION_FAILED error naming `label` and the tensor for inputs that cannot be
 * written: bad or duplicate names, unsupported dtypes, a shape that does not match the data,
 * metadata that is not strings. Exported so that a multi-file save can check every input
 * before it writes its first file.
 */
export function checkSafetensorsInputs(tensors: ReadonlyArray<SafetensorsTensorInput>, metadata: Record<string, string> | undefined, label: string): void {
  const bad = (field: string, problem: string, tensor?: string) => fail(ErrorCode.VALIDATION_FAILED, label, field, problem, tensor);
  const seen = new Set<string>();
  for (const t of tensors) {
    if (typeof t.name !== 'string' || t.name === '__metadata__' || !wellFormed(t.name)) throw bad('name', `${show(t.name)} cannot name a tensor`);
    if (seen.has(t.name)) throw bad('name', 'appears twice', t.name);
    seen.add(t.name);
    if (t.dtype !== undefined && !isDtype(t.dtype))
      throw bad('dtype', `unsupported dtype ${show(t.dtype)} (supported: ${SAFETENSORS_DTYPES.join(', ')})`, t.name);
    // By tag, not instanceof: typed arrays from native TensorFlow or another realm (jest's sandbox) fail instanceof.
    if (Object.prototype.toString.call(t.data) !== '[object Float32Array]') throw bad('data', 'must be a Float32Array', t.name);
    if (!isCounts(t.shape)) throw bad('shape', `must be an array of non-negative integers, got ${show(t.shape)}`, t.name);
    const elements = t.shape.reduce((p, d) => p * d, 1);
    if (elements !== t.data.length) throw bad('shape', `${show(t.shape)} has ${elements} elements but data has ${t.data.length}`, t.name);
  }
  if (metadata !== undefined) {
    if (!isObject(metadata)) throw bad('__metadata__', 'must be an object of strings');
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string' || !wellFormed(k) || !wellFormed(v)) throw bad(`__metadata__.${k}`, `must be a well-formed string, got ${show(v)}`);
    }
  }
}

/**
 * Lays the inputs out as the reference writer does: by descending dtype alignment (F32, then
 * BF16, then F16), then by name in UTF-8 byte order; the header JSON is compact, `__metadata__`
 * first (its keys sorted), tensors in data order, padded with spaces to a multiple of 8 so that
 * every tensor's data is 8-byte aligned in the file.
 */
function plan(tensors: ReadonlyArray<SafetensorsTensorInput>, metadata: Record<string, string> | undefined, label: string) {
  checkSafetensorsInputs(tensors, metadata, label);
  let offset = 0;
  const planned: Planned[] = tensors
    .map((t) => ({ name: t.name, dtype: t.dtype ?? 'F32', shape: t.shape, data: t.data, begin: 0, end: 0 }))
    .sort((a, b) => DTYPE_RANK[b.dtype] - DTYPE_RANK[a.dtype] || utf8Compare(a.name, b.name));
  for (const p of planned) {
    p.begin = offset;
    p.end = offset += p.data.length * SAFETENSORS_ITEM_BYTES[p.dtype];
  }
  const parts: string[] = [];
  if (metadata !== undefined) {
    const keys = Object.keys(metadata).sort(utf8Compare);
    parts.push(`"__metadata__":{${keys.map((k) => `${JSON.stringify(k)}:${JSON.stringify(metadata[k])}`).join(',')}}`);
  }
  for (const p of planned) {
    parts.push(`${JSON.stringify(p.name)}:{"dtype":"${p.dtype}","shape":[${p.shape.join(',')}],"data_offsets":[${p.begin},${p.end}]}`);
  }
  const json = Buffer.from(`{${parts.join(',')}}`, 'utf8');
  const n = json.length + ((8 - (json.length % 8)) % 8);
  if (n > SAFETENSORS_MAX_HEADER_BYTES)
    throw fail(ErrorCode.VALIDATION_FAILED, label, 'header', `would be ${n} bytes, over the ${SAFETENSORS_MAX_HEADER_BYTES}-byte limit readers enforce`);
  const head = Buffer.alloc(8 + n, 0x20);
  head.writeBigUInt64LE(BigInt(n), 0);
  json.copy(head, 8);
  return { head, planned, dataBytes: offset };
}

/** Serialises tensors into one buffer, laid out byte for byte like Python's `safetensors.save`. */
export function encodeSafetensors(tensors: ReadonlyArray<SafetensorsTensorInput>, metadata?: Record<string, string>): Buffer {
  const { head, planned, dataBytes } = plan(tensors, metadata, 'encodeSafetensors');
  const out = Buffer.alloc(head.length + dataBytes);
  head.copy(out, 0);
  for (const p of planned) out.set(encode(p.dtype, p.data), head.length + p.begin);
  return out;
}

/** `writeSync` may write less than asked. */
function writeAll(fd: number, bytes: Uint8Array): void {
  for (let done = 0; done < bytes.length;) done += fs.writeSync(fd, bytes, done, Math.min(bytes.length - done, CHUNK));
}

/**
 * Writes a safetensors file atomically: into a temporary file beside it, fsynced, then renamed
 * over `file`, so a crash leaves either the old file or the new one, never half of one. Tensors
 * are encoded one at a time, so memory stays at one tensor's bytes beyond the inputs.
 */
export function writeSafetensors(file: string, tensors: ReadonlyArray<SafetensorsTensorInput>, metadata?: Record<string, string>): void {
  const { head, planned } = plan(tensors, metadata, file);
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
  let fd: number | undefined;
  try {
    fd = fs.openSync(tmp, 'wx');
    writeAll(fd, head);
    for (const p of planned) writeAll(fd, encode(p.dtype, p.data));
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fd = undefined;
    fs.renameSync(tmp, file);
  } catch (e) {
    if (fd !== undefined) fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    throw e instanceof SrpoError ? e : ioError(file, e, 'write');
  }
}
