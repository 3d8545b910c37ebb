import * as avro from 'avsc';
import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { startFakeSchemaRegistry } from '@srpo/testing';
import { crc64Avro } from './crc64-avro';
import { DecodeError, defaultSchemasDir, EventCodec, SchemaSet } from './event-codec';
import { EVENT_TYPES, EventType } from './event-types';
import { ReasonCode } from './reason-codes';
import { sampleEvents } from './sample-events';
import { confluentFrame, confluentSchemaId, SchemaRegistryClient } from './schema-registry';

function readSchema(name: string): avro.Schema {
  return JSON.parse(fs.readFileSync(path.join(defaultSchemasDir(), `${name}.avsc`), 'utf8')) as avro.Schema;
}

function expectReason(fn: () => unknown, reason: ReasonCode): void {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(DecodeError);
  expect((caught as DecodeError).reasonCode).toBe(reason);
}

describe('EventCodec (single-object encoding)', () => {
  const codec = new EventCodec();
  const samples = sampleEvents(1);

  it.each(EVENT_TYPES)('round-trips a %s', (type) => {
    const bytes = codec.encode(type, samples[type]);
    const decoded = codec.decode(bytes);
    expect(decoded.type).toBe(type);
    expect(decoded.value).toEqual(samples[type]);
  });

  it('writes C3 01, then the CRC-64-AVRO of the canonical form, then the Avro body', () => {
    const bytes = codec.encode('PolicyVersion', samples.PolicyVersion);
    expect(bytes.subarray(0, 2)).toEqual(Buffer.from([0xc3, 0x01]));
    const canonical = JSON.stringify(avro.Type.forSchema(readSchema('PolicyVersion')).schema());
    const expectedFp = Buffer.alloc(8);
    expectedFp.writeBigUInt64LE(crc64Avro(Buffer.from(canonical)));
    expect(bytes.subarray(2, 10)).toEqual(expectedFp);
    // Body: Avro binary of the record, independently encoded by avsc from the raw schema.
    expect(bytes.subarray(10)).toEqual(avro.Type.forSchema(readSchema('PolicyVersion')).toBuffer(samples.PolicyVersion));
  });

  it('every schema documents every field', () => {
    const undocumented: string[] = [];
    const visit = (schema: unknown, where: string): void => {
      if (Array.isArray(schema)) return schema.forEach((s) => visit(s, where));
      if (typeof schema !== 'object' || schema === null) return;
      const s = schema as { type?: unknown; fields?: { name: string; doc?: string; type: unknown }[]; items?: unknown; values?: unknown };
      for (const f of s.fields ?? []) {
        if (!f.doc) undocumented.push(`${where}.${f.name}`);
        visit(f.type, `${where}.${f.name}`);
      }
      visit(s.items, where);
      visit(s.values, where);
      if (typeof s.type === 'object') visit(s.type, where);
    };
    for (const t of EVENT_TYPES) visit(readSchema(t), t);
    expect(undocumented).toEqual([]);
  });

  it('refuses a value that does not match the schema, naming the field', () => {
    const bad = { ...samples.AgentOutput, step: 1.5 };
    expect(() => codec.encode('AgentOutput', bad)).toThrow(ValidationError);
    expect(() => codec.encode('AgentOutput', bad)).toThrow(/AgentOutput\.step/);
    const missing: Record<string, unknown> = { ...samples.Transition };
    delete missing.taskId;
    expect(() => codec.encode('Transition', missing as never)).toThrow(/Transition\.taskId/);
    expect(() => codec.encode('EpisodeOutcome', { ...samples.EpisodeOutcome, extra: 1 } as never, { strict: true })).toThrow(ValidationError);
  });

  it('refuses to encode above the payload limit', () => {
    const small = new EventCodec(codec.schemas, { maxPayloadBytes: 64 });
    expect(() => small.encode('AgentOutput', samples.AgentOutput)).toThrow(SrpoError);
    try {
      small.encode('AgentOutput', samples.AgentOutput);
    } catch (e) {
      expect((e as SrpoError).code).toBe(ErrorCode.PAYLOAD_TOO_LARGE);
    }
  });

  describe('decode errors carry a reason code', () => {
    const good = codec.encode('Transition', samples.Transition);
    it('empty and short messages are truncated', () => {
      expectReason(() => codec.decode(Buffer.alloc(0)), ReasonCode.DECODE_TRUNCATED);
      expectReason(() => codec.decode(null), ReasonCode.DECODE_TRUNCATED);
      expectReason(() => codec.decode(good.subarray(0, 6)), ReasonCode.DECODE_TRUNCATED);
      expectReason(() => codec.decode(good.subarray(0, good.length - 3)), ReasonCode.DECODE_TRUNCATED);
    });
    it('a wrong magic header', () => {
      const bad = Buffer.from(good);
      bad[0] = 0x7b; // '{', as JSON would start
      expectReason(() => codec.decode(bad), ReasonCode.DECODE_BAD_MAGIC);
    });
    it('an unknown schema fingerprint', () => {
      const bad = Buffer.from(good);
      bad.writeBigUInt64LE(0x0123456789abcdefn, 2);
      expectReason(() => codec.decode(bad), ReasonCode.UNKNOWN_SCHEMA);
    });
    it("a valid header in front of another schema's payload", () => {
      const outcomeBody = codec.encode('EpisodeOutcome', samples.EpisodeOutcome).subarray(10);
      const forged = Buffer.concat([good.subarray(0, 10), outcomeBody]);
      let caught: unknown;
      try {
        codec.decode(forged);
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(DecodeError);
      expect([ReasonCode.DECODE_MALFORMED, ReasonCode.DECODE_TRUNCATED]).toContain((caught as DecodeError).reasonCode);
    });
    it('trailing bytes', () => {
      expectReason(() => codec.decode(Buffer.concat([good, Buffer.from([0])])), ReasonCode.DECODE_MALFORMED);
    });
    it('a message over the size limit', () => {
      const small = new EventCodec(codec.schemas, { maxPayloadBytes: 32 });
      expectReason(() => small.decode(good), ReasonCode.PAYLOAD_TOO_LARGE);
    });
    it('decodeAs checks the event type', () => {
      expectReason(() => codec.decodeAs('AgentOutput', good), ReasonCode.WRONG_EVENT_TYPE);
      expect(codec.decodeAs('Transition', good)).toEqual(samples.Transition);
    });
  });
});

describe('schema evolution', () => {
  // v2 of AgentOutput adds a field with a default and drops none: a compatible change.
  const v1 = readSchema('AgentOutput') as { fields: unknown[] } & avro.Schema;
  const v2 = {
    ...(v1 as object),
    fields: [...v1.fields, { name: 'reasoningTokens', type: 'int', default: 0, doc: 'Hidden reasoning tokens spent.' }],
  } as avro.Schema;

  function schemaSetWithReader(reader: avro.Schema, writer: avro.Schema): SchemaSet {
    const set = SchemaSet.fromDirectory();
    set.addReaderSchema(reader);
    set.addWriterSchema(writer);
    return set;
  }

  it('a v2 reader decodes v1 bytes, filling the default', () => {
    const oldCodec = new EventCodec(schemaSetWithReader(v1, v1));
    const newCodec = new EventCodec(schemaSetWithReader(v2, v1));
    const sample = sampleEvents(2).AgentOutput;
    const bytes = oldCodec.encode('AgentOutput', sample);
    const decoded = newCodec.decodeAs('AgentOutput', bytes) as unknown as Record<string, unknown>;
    expect(decoded.reasoningTokens).toBe(0);
    expect(decoded.outputId).toBe(sample.outputId);
    expect(decoded.behaviourLogProbs).toEqual(sample.behaviourLogProbs);
  });

  it('a v1 reader decodes v2 bytes, ignoring the new field', () => {
    const newWriter = new EventCodec(schemaSetWithReader(v2, v2));
    const oldReader = new EventCodec(schemaSetWithReader(v1, v2));
    const sample = { ...sampleEvents(3).AgentOutput, reasoningTokens: 17 };
    const bytes = newWriter.encode('AgentOutput', sample);
    const decoded = oldReader.decodeAs('AgentOutput', bytes);
    expect(decoded).toEqual(sampleEvents(3).AgentOutput);
    expect(Object.keys(decoded)).not.toContain('reasoningTokens');
  });

  it('refuses, as UNKNOWN_SCHEMA, bytes whose writer cannot resolve into the reader', () => {
    // v3 adds a field without a default: a v3 reader cannot fill it from v1 bytes.
    const v3 = { ...(v1 as object), fields: [...v1.fields, { name: 'mandatory', type: 'string', doc: 'x' }] } as avro.Schema;
    const v1Bytes = new EventCodec(schemaSetWithReader(v1, v1)).encode('AgentOutput', sampleEvents(4).AgentOutput);
    const v3Reader = new EventCodec(schemaSetWithReader(v3, v1));
    expectReason(() => v3Reader.decode(v1Bytes), ReasonCode.UNKNOWN_SCHEMA);
  });

  it('loads every event type from schemas/', () => {
    const set = SchemaSet.fromDirectory();
    const types: EventType[] = [...EVENT_TYPES];
    expect(types.map((t) => set.reader(t).eventType)).toEqual(types);
  });
});

describe('EventCodec.encode framing (in-place scratch)', () => {
  const codec = new EventCodec();
  const samples = sampleEvents(2);
  const frame = (type: EventType, value: unknown): Buffer => {
    const entry = codec.schemas.reader(type);
    const fp = Buffer.alloc(8);
    fp.writeBigUInt64LE(entry.fingerprint);
    return Buffer.concat([Buffer.from([0xc3, 0x01]), fp, entry.avroType.toBuffer(value)]);
  };

  it.each(EVENT_TYPES)('writes C3 01, the fingerprint and the avsc body for a %s', (type) => {
    expect(codec.encode(type, samples[type] as never).equals(frame(type, samples[type]))).toBe(true);
  });

  it('writes the Confluent frame of the avsc body with the registry id', async () => {
    const registry = await startFakeSchemaRegistry();
    try {
      const framed = new EventCodec(SchemaSet.fromDirectory(), { registry: new SchemaRegistryClient({ url: registry.url }) });
      await framed.useRegistry();
      const bytes = framed.encode('Transition', samples.Transition);
      const id = confluentSchemaId(bytes) as number;
      expect(bytes.equals(confluentFrame(id, framed.schemas.reader('Transition').avroType.toBuffer(samples.Transition)))).toBe(true);
    } finally {
      registry.server.close();
    }
  });

  it('grows the scratch for a value larger than it, and later encodes are not affected', () => {
    const small = codec.encode('Transition', samples.Transition);
    // 50,000 tokens of 1-3 varint bytes, log-probs of 4 bytes: well over the 64 KiB initial scratch.
    const n = 50_000;
    const big = {
      ...samples.AgentOutput,
      responseTokenIds: Array.from({ length: n }, (_, i) => i % 30_000),
      behaviourLogProbs: Array.from({ length: n }, () => -0.5),
      lossMask: Array.from({ length: n }, () => true),
    };
    const bytes = codec.encode('AgentOutput', big, { maxBytes: 4 * 1024 * 1024 });
    expect(bytes.length).toBeGreaterThan(64 * 1024);
    expect(bytes.equals(frame('AgentOutput', big))).toBe(true);
    // Each result owns its bytes: encoding again must not overwrite an earlier one.
    const again = codec.encode('Transition', samples.Transition);
    expect(again.equals(small)).toBe(true);
    expect(small.equals(frame('Transition', samples.Transition))).toBe(true);
    expect(bytes.equals(frame('AgentOutput', big))).toBe(true);
  });
});
