import * as avro from 'avsc';

/**
 * A bounds-checking walk of an Avro binary body, run before avsc decodes it.
 *
 * avsc believes the item count of every array and map block: a record claiming
 * 2^31 items keeps its read loop running (and allocating) for seconds past the
 * end of the bytes, and decoding is synchronous, so a consumer stops heartbeating
 * and the group rebalances onto the same record. String and bytes lengths were
 * already safe (avsc checks them against the buffer); counts were not.
 *
 * The walk follows the writer schema over the bytes without building values and
 * refuses, naming the field:
 * - a block count larger than the bytes left could hold: every item takes at
 *   least its type's minimum size (one byte for a varint, four for a float, ...);
 *   in a block with a negative count, which Avro follows with the block's byte
 *   size, the count must fit in that size, the size in the message, and the items
 *   must end exactly where the size says;
 * - more array items and map entries in the whole message than it has bytes
 *   (a valid body never has: each item but a zero-byte one, such as a null, owns
 *   at least one byte; zero-byte items pass the first rule, this bounds them);
 * - negative string, bytes or block sizes, union and enum indexes out of range.
 * Work is therefore linear in the message length, itself bounded by the codec's
 * `maxPayloadBytes` before the walk starts.
 */

/** `truncated`: a length or count claims more bytes than are left; `malformed`: a value no writer could produce. */
export type ScanFailure = 'truncated' | 'malformed';

/** The body cannot be what its schema says; `field` is the dotted path (`[]` an array item, `{}` a map value). */
export class AvroScanError extends Error {
  constructor(
    readonly failure: ScanFailure,
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

/** Walks a body written with one schema from `start`; returns the offset after it or throws {@link AvroScanError}. */
export type BodyScan = (buf: Buffer, start: number) => number;

interface ScanState {
  end: number;
  /** Array items and map entries the rest of the message may still hold. */
  itemBudget: number;
  /** The value of the last varint `readLong` read (a second return value, without allocating). */
  long: number;
}

/** Advances over one value at `pos`; returns the offset after it. */
type Skip = (buf: Buffer, pos: number, s: ScanState) => number;
/** Advances over `n` consecutive items. */
type SkipItems = (buf: Buffer, pos: number, n: number, s: ScanState) => number;

const truncated = (field: string, message: string) => new AvroScanError('truncated', field, message);
const malformed = (field: string, message: string) => new AvroScanError('malformed', field, message);

/** Zigzag varint as avsc reads it (float arithmetic past 28 bits), into `s.long`. */
function readLong(buf: Buffer, pos: number, s: ScanState): number {
  let n = 0;
  let k = 0;
  let b: number;
  let h: number;
  do {
    b = buf[pos++];
    h = b & 0x80;
    n |= (b & 0x7f) << k;
    k += 7;
  } while (h && k < 28);
  if (!h) {
    s.long = (n >> 1) ^ -(n & 1);
    return pos;
  }
  let f = n;
  let fk = 268435456; // 2 ** 28
  do {
    b = buf[pos++];
    f += (b & 0x7f) * fk;
    fk *= 128;
  } while (b & 0x80);
  s.long = (f % 2 ? -(f + 1) : f) / 2;
  return pos;
}

// Past the end of a Buffer an index reads `undefined`, whose `& 0x80` is 0: the loop stops there.
const skipVarint: Skip = (buf, pos) => {
  while (buf[pos++] & 0x80);
  return pos;
};

const skipVarints: SkipItems = (buf, pos, n) => {
  for (let i = 0; i < n; i++) while (buf[pos++] & 0x80);
  return pos;
};

const skipNothing: Skip = (_buf, pos) => pos;

function skipSized(field: string, what: string): Skip {
  return (buf, pos, s) => {
    pos = readLong(buf, pos, s);
    const len = s.long;
    if (!(len >= 0)) throw malformed(field, `${what} length ${len} is negative`);
    if (!(len <= s.end - pos)) throw truncated(field, `${what} length ${len} runs past the end of the message`);
    return pos + len;
  };
}

function skipIndex(field: string, what: string, count: number, branches?: Skip[]): Skip {
  return (buf, pos, s) => {
    pos = readLong(buf, pos, s);
    const i = s.long;
    if (!(i >= 0 && i < count)) {
      if (pos > s.end) throw truncated(field, `${what} index runs past the end of the message`);
      throw malformed(field, `${what} index ${i} is out of range (${count} ${what === 'enum' ? 'symbols' : 'branches'})`);
    }
    return branches ? branches[i](buf, pos, s) : pos;
  };
}

/** The fewest bytes a value of `type` can take (`open`: records being measured, for recursive schemas). */
function minBytes(type: avro.Type, open: Set<avro.Type> = new Set()): number {
  const t = underlying(type);
  switch (baseName(t)) {
    case 'null':
      return 0;
    case 'float':
      return 4;
    case 'double':
      return 8;
    case 'fixed':
      return (t as avro.types.FixedType).size;
    case 'record': {
      if (open.has(t)) return 0;
      open.add(t);
      const sum = (t as avro.types.RecordType).fields.reduce((acc, f) => acc + minBytes(f.type, open), 0);
      open.delete(t);
      return sum;
    }
    default:
      // boolean, int, long, enum, string, bytes: one byte at least; array and map: the final 0
      // count; union: its index (a varint) and at least nothing.
      return 1;
  }
}

/** The type name with logical types replaced by their underlying type and `error` read as `record`. */
function baseName(type: avro.Type): string {
  let t = type;
  while (t.typeName.startsWith('logical:')) t = (t as avro.types.LogicalType).underlyingType;
  const name = t.typeName;
  if (name === 'error') return 'record';
  if (name === 'abstract:long') return 'long';
  return name.startsWith('union:') ? 'union' : name;
}

function underlying(type: avro.Type): avro.Type {
  let t = type;
  while (t.typeName.startsWith('logical:')) t = (t as avro.types.LogicalType).underlyingType;
  return t;
}

/** Compiles the walk of one schema into closures, once per schema (`open`: records being compiled, for recursion). */
class ScanCompiler {
  private readonly open = new Map<avro.Type, { impl?: Skip }>();

  compile(type: avro.Type, field: string): Skip {
    const t = underlying(type);
    switch (baseName(t)) {
      case 'null':
        return skipNothing;
      case 'boolean':
        return (_buf, pos) => pos + 1;
      case 'int':
      case 'long':
        return skipVarint;
      case 'float':
        return (_buf, pos) => pos + 4;
      case 'double':
        return (_buf, pos) => pos + 8;
      case 'fixed': {
        const size = (t as avro.types.FixedType).size;
        return (_buf, pos) => pos + size;
      }
      case 'string':
        return skipSized(field, 'string');
      case 'bytes':
        return skipSized(field, 'bytes');
      case 'enum':
        return skipIndex(field, 'enum', (t as avro.types.EnumType).symbols.length);
      case 'union': {
        const branches = (t as avro.types.UnwrappedUnionType).types.map((b) => this.compile(b, field));
        return skipIndex(field, 'union', branches.length, branches);
      }
      case 'record':
        return this.record(t as avro.types.RecordType, field);
      case 'array': {
        const items = (t as avro.types.ArrayType).itemsType;
        return skipBlocks(field, 'array', minBytes(items), this.items(items, `${field}[]`));
      }
      case 'map': {
        const values = (t as avro.types.MapType).valuesType as avro.Type;
        const key = skipSized(`${field}{}`, 'map key');
        const value = this.compile(values, `${field}{}`);
        const entries: SkipItems = (buf, pos, n, s) => {
          for (let i = 0; i < n; i++) pos = value(buf, key(buf, pos, s), s);
          return pos;
        };
        return skipBlocks(field, 'map', 1 + minBytes(values), entries);
      }
      default:
        throw new Error(`no bounds walk for Avro type ${t.typeName} at ${field}`);
    }
  }

  /** Items of fixed size are skipped by arithmetic, varints by a tight loop, anything else one by one. */
  private items(type: avro.Type, field: string): SkipItems {
    const name = baseName(type);
    const fixed =
      name === 'boolean' ? 1 : name === 'float' ? 4 : name === 'double' ? 8 : name === 'fixed' ? (underlying(type) as avro.types.FixedType).size : -1;
    if (fixed >= 0) return (_buf, pos, n) => pos + n * fixed;
    if (name === 'int' || name === 'long') return skipVarints;
    const item = this.compile(type, field);
    return (buf, pos, n, s) => {
      for (let i = 0; i < n; i++) pos = item(buf, pos, s);
      return pos;
    };
  }

  private record(type: avro.types.RecordType, field: string): Skip {
    const compiling = this.open.get(type);
    // A recursive reference: call through the record being compiled (its path names the outer field).
    if (compiling) return (buf, pos, s) => (compiling.impl as Skip)(buf, pos, s);
    const slot: { impl?: Skip } = {};
    this.open.set(type, slot);
    const fields = type.fields.filter((f) => baseName(f.type) !== 'null').map((f) => this.compile(f.type, `${field}.${f.name}`));
    this.open.delete(type);
    slot.impl =
      fields.length === 1
        ? fields[0]
        : (buf, pos, s) => {
            for (let i = 0; i < fields.length; i++) pos = fields[i](buf, pos, s);
            return pos;
          };
    return slot.impl;
  }
}

/** Array and map blocks: a count, items, until a zero count (a negative count is followed by the block's byte size). */
function skipBlocks(field: string, kind: 'array' | 'map', itemMin: number, items: SkipItems): Skip {
  const unit = kind === 'array' ? 'items' : 'entries';
  return (buf, pos, s) => {
    for (;;) {
      pos = readLong(buf, pos, s);
      let n = s.long;
      if (n === 0) return pos;
      let blockEnd = -1;
      if (n < 0) {
        n = -n;
        pos = readLong(buf, pos, s);
        const size = s.long;
        if (!(size >= 0)) throw malformed(field, `${kind} block byte size ${size} is negative`);
        if (!(size <= s.end - pos)) throw truncated(field, `${kind} block byte size ${size} runs past the end of the message`);
        blockEnd = pos + size;
      }
      const room = (blockEnd < 0 ? s.end : blockEnd) - pos;
      if (!(n * itemMin <= room)) {
        throw truncated(field, `${kind} block count ${n} cannot fit in the ${Math.max(room, 0)} bytes left (at least ${itemMin} per item)`);
      }
      s.itemBudget -= n;
      if (s.itemBudget < 0) throw malformed(field, `more array items and map entries than the message has bytes`);
      const blockStart = pos;
      pos = items(buf, pos, n, s);
      if (pos > s.end) throw truncated(field, `the ${n} ${unit} of a ${kind} block run past the end of the message`);
      if (blockEnd >= 0 && pos !== blockEnd) {
        throw malformed(field, `${kind} block byte size ${blockEnd - blockStart} disagrees with its ${n} ${unit} (${pos - blockStart} bytes)`);
      }
    }
  };
}

/** Compiles the walk for bodies written with `type`; `name` starts every field path (the event type). */
export function compileBodyScan(type: avro.Type, name: string): BodyScan {
  const skip = new ScanCompiler().compile(type, name);
  return (buf, start) => {
    const s: ScanState = { end: buf.length, itemBudget: buf.length - start, long: 0 };
    const pos = skip(buf, start, s);
    if (pos > buf.length) throw truncated(name, 'the body ends early');
    return pos;
  };
}
