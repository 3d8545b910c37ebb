import * as avro from 'avsc';
import * as fs from 'fs';
import * as path from 'path';
import { AvroScanError, compileBodyScan } from './avro-body-scan';
import { DecodeError, defaultSchemasDir, EventCodec, SchemaSet, SINGLE_OBJECT_HEADER_BYTES } from './event-codec';
import { ActiveSet, AdvantageGroup, EVENT_TYPES, EventType } from './event-types';
import { ReasonCode } from './reason-codes';
import { sampleEvents } from './sample-events';

const codec = new EventCodec();
const longType = avro.Type.forSchema('long');
const varint = (n: number): Buffer => longType.toBuffer(n);

/** Offset in the framed message of the value at `fieldPath` (nested records allowed), by encoding the fields before it. */
function offsetOf(type: EventType, value: unknown, fieldPath: string[]): number {
  let record = codec.schemas.reader(type).avroType as avro.types.RecordType;
  let v = value as Record<string, unknown>;
  let offset = SINGLE_OBJECT_HEADER_BYTES;
  for (const name of fieldPath) {
    for (const f of record.fields) {
      if (f.name === name) break;
      offset += f.type.toBuffer(v[f.name]).length;
    }
    record = record.field(name).type as avro.types.RecordType;
    v = v[name] as Record<string, unknown>;
  }
  return offset;
}

/** `bytes` with the varint at `at` (an array or map's first block count) replaced by `replacement`. */
function spliceCount(bytes: Buffer, at: number, replacement: Buffer): Buffer {
  const oldLength = longType.decode(bytes, at).offset - at;
  return Buffer.concat([bytes.subarray(0, at), replacement, bytes.subarray(at + oldLength)]);
}

/** Decodes, expecting a DecodeError; returns it and how long the codec took. */
function refusal(bytes: Buffer, decoder: EventCodec = codec): { error: DecodeError; ms: number } {
  const t0 = process.hrtime.bigint();
  let caught: unknown;
  try {
    decoder.decode(bytes);
  } catch (e) {
    caught = e;
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  expect(caught).toBeInstanceOf(DecodeError);
  return { error: caught as DecodeError, ms };
}

const TWO_31 = 2 ** 31;

describe('hostile block counts fail fast with a DecodeError naming the field', () => {
  const samples = sampleEvents(1);

  it('an array count of 2^31 (AgentOutput.responseTokenIds)', () => {
    const good = codec.encode('AgentOutput', samples.AgentOutput);
    const bad = spliceCount(good, offsetOf('AgentOutput', samples.AgentOutput, ['responseTokenIds']), varint(TWO_31));
    const { error, ms } = refusal(bad);
    expect(ms).toBeLessThan(1000);
    expect(error.reasonCode).toBe(ReasonCode.DECODE_TRUNCATED);
    expect(error.field).toBe('AgentOutput.responseTokenIds');
    expect(error.message).toMatch(/AgentOutput\.responseTokenIds: array block count 2147483648 cannot fit in the \d+ bytes left/);
  });

  it('a map count of 2^31 (EpisodeOutcome.verifierDetails)', () => {
    const good = codec.encode('EpisodeOutcome', samples.EpisodeOutcome);
    const bad = spliceCount(good, offsetOf('EpisodeOutcome', samples.EpisodeOutcome, ['verifierDetails']), varint(TWO_31));
    const { error, ms } = refusal(bad);
    expect(ms).toBeLessThan(1000);
    expect(error.reasonCode).toBe(ReasonCode.DECODE_TRUNCATED);
    expect(error.field).toBe('EpisodeOutcome.verifierDetails');
    expect(error.message).toMatch(/EpisodeOutcome\.verifierDetails: map block count 2147483648 cannot fit/);
  });

  it('an array count of 2^31 nested in a record (AgentOutput.sampling.stopTokenIds)', () => {
    const good = codec.encode('AgentOutput', samples.AgentOutput);
    const bad = spliceCount(good, offsetOf('AgentOutput', samples.AgentOutput, ['sampling', 'stopTokenIds']), varint(TWO_31));
    const { error, ms } = refusal(bad);
    expect(ms).toBeLessThan(1000);
    expect(error.field).toBe('AgentOutput.sampling.stopTokenIds');
  });

  it('a count of -2^31 followed by a block size: the count must fit in the size, the size in the message', () => {
    const good = codec.encode('AgentOutput', samples.AgentOutput);
    const at = offsetOf('AgentOutput', samples.AgentOutput, ['contextTokenIds']);
    const left = good.length - at;
    const countInSize = refusal(spliceCount(good, at, Buffer.concat([varint(-TWO_31), varint(left - 6)])));
    expect(countInSize.ms).toBeLessThan(1000);
    expect(countInSize.error.reasonCode).toBe(ReasonCode.DECODE_TRUNCATED);
    expect(countInSize.error.message).toMatch(/AgentOutput\.contextTokenIds: array block count 2147483648 cannot fit/);
    const sizeInMessage = refusal(spliceCount(good, at, Buffer.concat([varint(-3), varint(2 ** 40)])));
    expect(sizeInMessage.error.reasonCode).toBe(ReasonCode.DECODE_TRUNCATED);
    expect(sizeInMessage.error.message).toMatch(/array block byte size 1099511627776 runs past the end/);
    const negativeSize = refusal(spliceCount(good, at, Buffer.concat([varint(-3), varint(-5)])));
    expect(negativeSize.error.reasonCode).toBe(ReasonCode.DECODE_MALFORMED);
  });

  it('a count of 2^31 in a field the reader does not have (skipped, not read, by avsc)', () => {
    const current = JSON.parse(codec.schemas.reader('AgentOutput').canonical) as { fields: unknown[] };
    const withExtra = { ...current, fields: [...current.fields, { name: 'extraIds', type: { type: 'array', items: 'long' } }] };
    const set = SchemaSet.fromDirectory();
    const writer = set.addWriterSchema(withExtra as avro.Schema);
    const decoder = new EventCodec(set);
    const body = writer.avroType.toBuffer({ ...samples.AgentOutput, extraIds: [1, 2] });
    const header = Buffer.alloc(SINGLE_OBJECT_HEADER_BYTES);
    header.set([0xc3, 0x01]);
    header.writeBigUInt64LE(writer.fingerprint, 2);
    const good = Buffer.concat([header, body]);
    expect(decoder.decodeAs('AgentOutput', good)).toEqual(samples.AgentOutput);
    // extraIds is the last field: its count is 4 bytes before the end ([2, 1, 2] zigzagged, then 0).
    const bad = spliceCount(good, good.length - 4, varint(TWO_31));
    const { error, ms } = refusal(bad, decoder);
    expect(ms).toBeLessThan(1000);
    expect(error.field).toBe('AgentOutput.extraIds');
  });
});

describe('valid bodies still decode', () => {
  it.each(EVENT_TYPES)('round-trips a %s (several samples)', (type) => {
    for (const n of [0, 1, 7]) {
      const value = sampleEvents(n)[type];
      expect(codec.decodeAs(type, codec.encode(type, value))).toEqual(value);
    }
  });

  it('a block with a negative count and its byte size (allowed by the Avro spec, never written by avsc)', () => {
    const value = sampleEvents(2).AgentOutput;
    const good = codec.encode('AgentOutput', value);
    const at = offsetOf('AgentOutput', value, ['responseTokenIds']);
    const itemBytes = value.responseTokenIds.reduce((sum, id) => sum + varint(id).length, 0);
    const blocked = spliceCount(good, at, Buffer.concat([varint(-value.responseTokenIds.length), varint(itemBytes)]));
    expect(codec.decodeAs('AgentOutput', blocked)).toEqual(value);
    // The same block claiming one byte more than its items take.
    const lying = spliceCount(good, at, Buffer.concat([varint(-value.responseTokenIds.length), varint(itemBytes + 1)]));
    const { error } = refusal(lying);
    expect(error.reasonCode).toBe(ReasonCode.DECODE_MALFORMED);
    expect(error.message).toMatch(/AgentOutput\.responseTokenIds: array block byte size \d+ disagrees with its 3 items/);
  });

  it('an AgentOutput of 50,000 tokens', () => {
    const n = 50_000;
    const big = {
      ...sampleEvents(3).AgentOutput,
      responseTokenIds: Array.from({ length: n }, (_, i) => i % 30_000),
      behaviourLogProbs: Array.from({ length: n }, () => -0.5),
      lossMask: Array.from({ length: n }, (_, i) => i % 2 === 0),
    };
    const bytes = codec.encode('AgentOutput', big, { maxBytes: 1024 * 1024 });
    expect(codec.decodeAs('AgentOutput', bytes)).toEqual(big);
  });

  // Each historical writer leaves out the fields added after it; the reader fills in their defaults
  // (for AdvantageGroup, in the ActiveSet of each of its sets).
  const LATER: Record<string, Record<string, unknown>> = {
    'AgentOutput.v1': { tokenIdOrigin: 'sampled', turn: 0, parentOutputId: null, tokenDrift: null, malformedToolCall: false, subjectId: null, sealed: null },
    'AgentOutput.v2': { turn: 0, parentOutputId: null, tokenDrift: null, malformedToolCall: false, subjectId: null, sealed: null },
    'AgentOutput.v3': { subjectId: null, sealed: null },
    'AgentOutput.v4': { sealed: null },
    'Transition.v1': { rewardSource: null, subjectId: null },
    'Transition.v2': { subjectId: null },
    'EpisodeOutcome.v1': { rewardSource: '', revision: 0, subjectId: null },
    'EpisodeOutcome.v2': { subjectId: null },
    'ActiveSet.v1': { correction: false, subjectIds: [] },
    'ActiveSet.v2': { subjectIds: [] },
    'AdvantageGroup.v1': { correction: false, subjectIds: [] },
    'AdvantageGroup.v2': { subjectIds: [] },
  };
  it.each(Object.keys(LATER))('bytes written with the historical %s schema', (name) => {
    const type = name.split('.')[0] as 'AgentOutput' | 'Transition' | 'EpisodeOutcome' | 'ActiveSet' | 'AdvantageGroup';
    const schema = JSON.parse(fs.readFileSync(path.join(defaultSchemasDir(), 'history', `${name}.avsc`), 'utf8')) as avro.Schema;
    const entry = codec.schemas.writer(SchemaSet.fromDirectory().addWriterSchema(schema).fingerprintHex);
    if (!entry) throw new Error(`schemas/history/${name}.avsc is not loaded as a writer schema`);
    const later = LATER[name];
    const without = (v: object): Record<string, unknown> => Object.fromEntries(Object.entries(v).filter(([k]) => !(k in later)));
    const sample = sampleEvents(4)[type] as object;
    const nested = type === 'AdvantageGroup';
    const inSets = (g: AdvantageGroup, f: (set: ActiveSet) => object) => ({ ...g, sets: g.sets.map((s) => ({ ...s, set: f(s.set) })) });
    const old = nested ? inSets(sample as AdvantageGroup, without) : without(sample);
    const expected = nested ? inSets(old as unknown as AdvantageGroup, (set) => ({ ...set, ...later })) : { ...old, ...later };
    const header = Buffer.alloc(SINGLE_OBJECT_HEADER_BYTES);
    header.set([0xc3, 0x01]);
    header.writeBigUInt64LE(entry.fingerprint, 2);
    expect(codec.decodeAs(type, Buffer.concat([header, entry.avroType.toBuffer(old)]))).toEqual(expected);
  });
});

describe('any corruption of a valid message is a DecodeError or a value, never a hang or another error', () => {
  it.each(['AgentOutput', 'EpisodeOutcome', 'AdvantageGroup'] as const)('%s: every cut and every byte set to 0x80 or 0xff', (type) => {
    const good = codec.encode(type, sampleEvents(5)[type]);
    const t0 = Date.now();
    const outcomes = new Set<string>();
    const attempt = (bytes: Buffer) => {
      try {
        codec.decode(bytes);
        outcomes.add('decoded');
      } catch (e) {
        expect(e).toBeInstanceOf(DecodeError);
        outcomes.add((e as DecodeError).reasonCode);
      }
    };
    for (let cut = SINGLE_OBJECT_HEADER_BYTES; cut < good.length; cut++) attempt(good.subarray(0, cut));
    for (let i = SINGLE_OBJECT_HEADER_BYTES; i < good.length; i++) {
      for (const b of [0x80, 0xff]) {
        const bad = Buffer.from(good);
        bad[i] = b;
        attempt(bad);
      }
    }
    expect(outcomes).toContain(ReasonCode.DECODE_TRUNCATED);
    expect(Date.now() - t0).toBeLessThan(5000);
  });
});

describe('compileBodyScan', () => {
  it('bounds zero-byte items by the message length, across blocks', () => {
    const scan = compileBodyScan(avro.Type.forSchema({ type: 'array', items: 'null' }), 'nulls');
    // Two nulls in one block: one count byte and the end. Items of zero bytes pass the per-block bound.
    expect(scan(Buffer.from([4, 0]), 0)).toBe(2);
    // Blocks of 3 nulls, again and again: 9 items in a 6-byte body.
    expect(() => scan(Buffer.from([6, 6, 6, 6, 6, 0]), 0)).toThrow(AvroScanError);
    expect(() => scan(Buffer.from([6, 6, 6, 6, 6, 0]), 0)).toThrow(/nulls: more array items and map entries than the message has bytes/);
  });

  it('refuses union and enum indexes out of range, and negative string lengths, as malformed', () => {
    const type = avro.Type.forSchema({
      type: 'record',
      name: 'R',
      fields: [
        { name: 'u', type: ['null', 'string'] },
        { name: 'e', type: { type: 'enum', name: 'E', symbols: ['A', 'B'] } },
      ],
    });
    const scan = compileBodyScan(type, 'R');
    expect(scan(Buffer.from([2, 2, 0x61, 2]), 0)).toBe(4);
    const failure = (bytes: number[]) => {
      try {
        scan(Buffer.from(bytes), 0);
      } catch (e) {
        return e as AvroScanError;
      }
      throw new Error('no failure');
    };
    expect(failure([4, 2])).toMatchObject({ failure: 'malformed', field: 'R.u' });
    expect(failure([0, 4])).toMatchObject({ failure: 'malformed', field: 'R.e' });
    expect(failure([2, 1, 0])).toMatchObject({ failure: 'malformed', field: 'R.u' });
    expect(failure([2, 8, 0x61])).toMatchObject({ failure: 'truncated', field: 'R.u' });
  });

  it('walks recursive schemas', () => {
    const type = avro.Type.forSchema({
      type: 'record',
      name: 'Node',
      fields: [
        { name: 'label', type: 'string' },
        { name: 'children', type: { type: 'array', items: 'Node' } },
      ],
    });
    const scan = compileBodyScan(type, 'Node');
    const bytes = type.toBuffer({
      label: 'a',
      children: [
        { label: 'b', children: [] },
        { label: 'c', children: [{ label: 'd', children: [] }] },
      ],
    });
    expect(scan(bytes, 0)).toBe(bytes.length);
    const bad = Buffer.concat([bytes.subarray(0, 2), varint(TWO_31), bytes.subarray(3)]);
    expect(() => scan(bad, 0)).toThrow(/Node\.children: array block count 2147483648/);
  });
});
