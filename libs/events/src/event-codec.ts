import * as avro from 'avsc';
import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { AvroScanError, BodyScan, compileBodyScan } from './avro-body-scan';
import { crc64Avro, fingerprintHex } from './crc64-avro';
import { EVENT_TYPES, EventMap, EventType } from './event-types';
import { ReasonCode } from './reason-codes';
import { CONFLUENT_HEADER_BYTES, CONFLUENT_MAGIC, confluentSchemaId, SchemaRegistryClient } from './schema-registry';

/** Avro single-object encoding marker (Avro spec, "Single-object encoding"). */
export const SINGLE_OBJECT_MAGIC = Buffer.from([0xc3, 0x01]);
export const SINGLE_OBJECT_HEADER_BYTES = 10;

/** Encoding scratch: starts at 64 KiB (a group of four sets of four outputs is ~15 KB), grows to at most 8 MiB. */
const INITIAL_SCRATCH_BYTES = 64 * 1024;
const MAX_SCRATCH_BYTES = 8 * 1024 * 1024;

/** A decode failure; `reasonCode` is what the dead-letter record carries, `field` the value's path where one is known. */
export class DecodeError extends SrpoError {
  constructor(
    readonly reasonCode: ReasonCode,
    message: string,
    field?: string,
  ) {
    super(reasonCode === ReasonCode.UNKNOWN_SCHEMA ? ErrorCode.UNKNOWN_SCHEMA : ErrorCode.DECODE_FAILED, message, {
      details: { reasonCode },
      field,
    });
  }
}

export interface SchemaEntry {
  eventType: EventType;
  avroType: avro.Type;
  /** CRC-64-AVRO of the parsing canonical form. */
  fingerprint: bigint;
  fingerprintHex: string;
  /** Parsing canonical form. */
  canonical: string;
  /** Bounds walk of bodies written with this schema (avro-body-scan.ts), run before avsc decodes them. */
  scan: BodyScan;
}

/**
 * The schemas this process knows: one reader schema per event type (the
 * current `schemas/*.avsc`) and any number of writer schemas (older or newer
 * versions, e.g. `schemas/history/*.avsc`), indexed by fingerprint.
 */
export class SchemaSet {
  private readonly readers = new Map<EventType, SchemaEntry>();
  private readonly writers = new Map<string, SchemaEntry>();

  /** Loads `dir/*.avsc` as reader schemas and `dir/history/*.avsc` as extra writer schemas. */
  static fromDirectory(dir: string = defaultSchemasDir()): SchemaSet {
    const set = new SchemaSet();
    for (const file of fs
      .readdirSync(dir)
      .filter((f) => f.endsWith('.avsc'))
      .sort()) {
      set.addReaderSchema(JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')) as avro.Schema);
    }
    const history = path.join(dir, 'history');
    if (fs.existsSync(history)) {
      for (const file of fs
        .readdirSync(history)
        .filter((f) => f.endsWith('.avsc'))
        .sort()) {
        set.addWriterSchema(JSON.parse(fs.readFileSync(path.join(history, file), 'utf8')) as avro.Schema);
      }
    }
    for (const t of EVENT_TYPES) {
      if (!set.readers.has(t)) throw new SrpoError(ErrorCode.CONFIG_INVALID, `schema for ${t} missing in ${dir}`);
    }
    return set;
  }

  addReaderSchema(schema: avro.Schema): SchemaEntry {
    const entry = makeEntry(schema);
    this.readers.set(entry.eventType, entry);
    this.writers.set(entry.fingerprintHex, entry);
    return entry;
  }

  /** Registers a schema that data may have been written with (not used to encode). */
  addWriterSchema(schema: avro.Schema): SchemaEntry {
    const entry = makeEntry(schema);
    if (!this.writers.has(entry.fingerprintHex)) this.writers.set(entry.fingerprintHex, entry);
    return entry;
  }

  reader(type: EventType): SchemaEntry {
    const entry = this.readers.get(type);
    if (!entry) throw new SrpoError(ErrorCode.CONFIG_INVALID, `no reader schema for ${type}`);
    return entry;
  }

  writer(fingerprintHexValue: string): SchemaEntry | undefined {
    return this.writers.get(fingerprintHexValue);
  }
}

function makeEntry(schema: avro.Schema): SchemaEntry {
  const avroType = avro.Type.forSchema(schema);
  const name = (avroType.name ?? '').split('.').pop() as EventType;
  if (!EVENT_TYPES.includes(name)) {
    throw new SrpoError(ErrorCode.CONFIG_INVALID, `schema ${avroType.name} is not an event type (${EVENT_TYPES.join(', ')})`);
  }
  const canonical = JSON.stringify(avroType.schema());
  const fingerprint = crc64Avro(Buffer.from(canonical, 'utf8'));
  const scan = compileBodyScan(avroType, name);
  return { eventType: name, avroType, fingerprint, fingerprintHex: fingerprintHex(fingerprint), canonical, scan };
}

/** Walks up from this file to the repository's `schemas/` directory (works from src and dist). */
export function defaultSchemasDir(): string {
  let dir = __dirname;
  for (let i = 0; i < 8; i++) {
    const candidate = path.join(dir, 'schemas');
    if (fs.existsSync(path.join(candidate, 'AgentOutput.avsc'))) return candidate;
    dir = path.dirname(dir);
  }
  throw new SrpoError(ErrorCode.CONFIG_INVALID, `schemas/ directory not found above ${__dirname}`);
}

export interface DecodedEvent<T extends EventType = EventType> {
  type: T;
  value: EventMap[T];
  /** Fingerprint of the schema the bytes were written with. */
  writerFingerprint: string;
}

export interface EventCodecOptions {
  /** Messages larger than this are refused on both sides (default 1 MiB). */
  maxPayloadBytes?: number;
  /**
   * When set, `encode` writes the Confluent wire format with ids from this
   * registry (call `useRegistry()` once before encoding), and Confluent-framed
   * input is decoded after `prefetch()` loaded its writer schemas.
   */
  registry?: SchemaRegistryClient;
}

/**
 * Avro single-object encoding: `C3 01`, the 8-byte little-endian CRC-64-AVRO
 * fingerprint of the writer schema, then the Avro binary body. Decoding
 * resolves the writer schema named by the fingerprint into the current reader
 * schema, so older and newer versions of an event both decode.
 */
export class EventCodec {
  readonly maxPayloadBytes: number;
  private readonly resolvers = new Map<string, avro.Resolver>();
  private readonly registry?: SchemaRegistryClient;
  /** Registry id of each current reader schema (Confluent mode). */
  private readonly registeredIds = new Map<EventType, number>();
  /** Writer schemas by registry id. */
  private readonly confluentWriters = new Map<number, SchemaEntry>();
  /**
   * Header and body are encoded here in place and copied out once. avsc's `toBuffer`
   * copies its own scratch into a new buffer and the frame then took a second copy
   * (`Buffer.concat`); active sets and groups carry whole outputs, so that was KBs a record.
   */
  private scratch = Buffer.allocUnsafe(INITIAL_SCRATCH_BYTES);

  constructor(
    readonly schemas: SchemaSet = SchemaSet.fromDirectory(),
    options: EventCodecOptions = {},
  ) {
    this.maxPayloadBytes = options.maxPayloadBytes ?? 1024 * 1024;
    this.registry = options.registry;
  }

  /** Whether `encode` needs `useRegistry()` (Confluent mode) before it can frame a message. */
  get usesRegistry(): boolean {
    return this.registry !== undefined;
  }

  /** Confluent mode: registers every current schema (record-name subjects) so `encode` can frame with ids. */
  async useRegistry(): Promise<void> {
    if (!this.registry) return;
    for (const type of EVENT_TYPES) {
      const entry = this.schemas.reader(type);
      const id = await this.registry.register(entry.avroType.name ?? type, JSON.parse(entry.canonical) as avro.Schema);
      this.registeredIds.set(type, id);
      this.confluentWriters.set(id, entry);
    }
  }

  /** Loads the writer schemas of any Confluent-framed messages whose ids are not known yet. */
  async prefetch(messages: readonly (Buffer | null)[]): Promise<void> {
    if (!this.registry) return;
    for (const m of messages) {
      const id = m ? confluentSchemaId(m) : undefined;
      if (id === undefined || this.confluentWriters.has(id)) continue;
      try {
        this.confluentWriters.set(id, makeEntry(await this.registry.schemaById(id)));
      } catch (e) {
        // An id the registry does not know stays unknown: decode dead-letters it as UNKNOWN_SCHEMA.
        if (!(e instanceof SrpoError) || e.code !== ErrorCode.UNKNOWN_SCHEMA) throw e;
      }
    }
  }

  /**
   * Encodes `value`; a value that does not fit the schema throws a
   * `ValidationError` naming the field. With `strict`, fields the schema does not
   * declare are refused too (the SDK uses it: a typo must not vanish silently).
   * `maxBytes` replaces the codec's limit for this message: a dead letter carries
   * a message that may itself be at or over the limit.
   */
  encode<T extends EventType>(type: T, value: EventMap[T], options: { strict?: boolean; maxBytes?: number } = {}): Buffer {
    const entry = this.schemas.reader(type);
    if (options.strict) assertSchemaValid(entry, value);
    const registryId = this.registry ? this.registeredIds.get(type) : undefined;
    const headerBytes = registryId !== undefined ? CONFLUENT_HEADER_BYTES : SINGLE_OBJECT_HEADER_BYTES;
    let buf = this.scratch;
    let end: number;
    try {
      end = entry.avroType.encode(value, buf, headerBytes);
      if (end < 0) {
        // avsc returned the bytes missing; encode again into a buffer that fits.
        const needed = buf.length - end;
        buf = Buffer.allocUnsafe(Math.max(needed, 2 * buf.length));
        // Very large values get a one-off buffer: the scratch stays bounded.
        if (buf.length <= MAX_SCRATCH_BYTES) this.scratch = buf;
        end = entry.avroType.encode(value, buf, headerBytes);
      }
    } catch (e) {
      // The fast path failed: find the field for the message.
      assertSchemaValid(entry, value);
      throw e;
    }
    if (this.registry && registryId === undefined) {
      throw new SrpoError(ErrorCode.CONFIG_INVALID, 'a schema registry is configured but useRegistry() was not awaited before encoding');
    }
    if (registryId !== undefined) {
      buf[0] = CONFLUENT_MAGIC;
      buf.writeUInt32BE(registryId, 1);
    } else {
      buf[0] = SINGLE_OBJECT_MAGIC[0];
      buf[1] = SINGLE_OBJECT_MAGIC[1];
      buf.writeBigUInt64LE(entry.fingerprint, 2);
    }
    const out = Buffer.allocUnsafe(end);
    buf.copy(out, 0, 0, end);
    const limit = options.maxBytes ?? this.maxPayloadBytes;
    if (out.length > limit) {
      throw new SrpoError(ErrorCode.PAYLOAD_TOO_LARGE, `${type}: encoded size ${out.length} B exceeds the limit of ${limit} B`);
    }
    return out;
  }

  /** Decodes any known event; throws {@link DecodeError} with a reason code. */
  decode(buf: Buffer | null): DecodedEvent {
    if (buf === null || buf.length === 0) throw new DecodeError(ReasonCode.DECODE_TRUNCATED, 'empty message');
    if (buf.length > this.maxPayloadBytes) {
      throw new DecodeError(ReasonCode.PAYLOAD_TOO_LARGE, `message of ${buf.length} B exceeds the limit of ${this.maxPayloadBytes} B`);
    }
    if (buf[0] === CONFLUENT_MAGIC) return this.decodeConfluent(buf);
    if (buf.length >= 2 && (buf[0] !== SINGLE_OBJECT_MAGIC[0] || buf[1] !== SINGLE_OBJECT_MAGIC[1])) {
      throw new DecodeError(
        ReasonCode.DECODE_BAD_MAGIC,
        `bad magic bytes ${buf.subarray(0, 2).toString('hex')}; expected c301 (Avro single-object encoding) or 00 (Confluent wire format)`,
      );
    }
    if (buf.length < SINGLE_OBJECT_HEADER_BYTES) {
      throw new DecodeError(ReasonCode.DECODE_TRUNCATED, `message of ${buf.length} B is shorter than the ${SINGLE_OBJECT_HEADER_BYTES}-byte header`);
    }
    const fp = buf.subarray(2, SINGLE_OBJECT_HEADER_BYTES).toString('hex');
    const writer = this.schemas.writer(fp);
    if (!writer) throw new DecodeError(ReasonCode.UNKNOWN_SCHEMA, `unknown schema fingerprint ${fp}`);
    const reader = this.schemas.reader(writer.eventType);
    const value = decodeBody(writer, reader, buf, SINGLE_OBJECT_HEADER_BYTES, this.resolvers);
    return { type: writer.eventType, value, writerFingerprint: fp };
  }

  private decodeConfluent(buf: Buffer): DecodedEvent {
    if (buf.length < CONFLUENT_HEADER_BYTES)
      throw new DecodeError(ReasonCode.DECODE_TRUNCATED, `Confluent-framed message of ${buf.length} B is shorter than its 5-byte header`);
    const id = buf.readUInt32BE(1);
    const writer = this.confluentWriters.get(id);
    if (!writer) {
      throw new DecodeError(
        ReasonCode.UNKNOWN_SCHEMA,
        this.registry ? `schema registry id ${id} is unknown` : `Confluent-framed message (schema id ${id}) but no schema registry is configured`,
      );
    }
    const reader = this.schemas.reader(writer.eventType);
    const value = decodeBody(writer, reader, buf, CONFLUENT_HEADER_BYTES, this.resolvers);
    return { type: writer.eventType, value, writerFingerprint: writer.fingerprintHex };
  }

  /** Decodes and checks that the event is of the expected type. */
  decodeAs<T extends EventType>(type: T, buf: Buffer | null): EventMap[T] {
    const decoded = this.decode(buf);
    if (decoded.type !== type) {
      throw new DecodeError(ReasonCode.WRONG_EVENT_TYPE, `expected a ${type} event, got ${decoded.type}`);
    }
    return decoded.value as EventMap[T];
  }
}

/** Decodes an Avro body written with `writer` into the `reader` schema. Shared by both wire formats. */
export function decodeBody(writer: SchemaEntry, reader: SchemaEntry, buf: Buffer, start: number, cache: Map<string, avro.Resolver>): EventMap[EventType] {
  let resolver: avro.Resolver | undefined;
  if (writer.fingerprintHex !== reader.fingerprintHex) {
    const key = `${writer.fingerprintHex}>${reader.fingerprintHex}`;
    resolver = cache.get(key);
    if (!resolver) {
      try {
        resolver = reader.avroType.createResolver(writer.avroType);
      } catch (e) {
        throw new DecodeError(
          ReasonCode.UNKNOWN_SCHEMA,
          `writer schema ${writer.fingerprintHex} cannot be resolved into the current ${reader.eventType} schema: ${(e as Error).message}`,
        );
      }
      cache.set(key, resolver);
    }
  }
  scanBody(writer, buf, start);
  let decoded: { value: unknown; offset: number };
  try {
    decoded = reader.avroType.decode(buf, start, resolver);
  } catch (e) {
    throw new DecodeError(ReasonCode.DECODE_MALFORMED, `${writer.eventType} payload does not decode: ${(e as Error).message}`);
  }
  if (decoded.offset < 0) throw new DecodeError(ReasonCode.DECODE_TRUNCATED, `${writer.eventType} payload ends early`);
  if (decoded.offset !== buf.length) {
    throw new DecodeError(ReasonCode.DECODE_MALFORMED, `${writer.eventType} payload has ${buf.length - decoded.offset} unexpected trailing bytes`);
  }
  return decoded.value as EventMap[EventType];
}

/**
 * The bounds walk (avro-body-scan.ts) over a body written with `writer`: avsc believes array and map
 * block counts, so a count the bytes cannot hold is refused here, in time linear in the message.
 */
function scanBody(writer: SchemaEntry, buf: Buffer, start: number): void {
  let end: number;
  try {
    end = writer.scan(buf, start);
  } catch (e) {
    // Anything else (a stack overflow on a deeply nested recursive schema) is undecodable too, as in avsc's decode.
    if (!(e instanceof AvroScanError))
      throw new DecodeError(ReasonCode.DECODE_MALFORMED, `${writer.eventType} payload does not decode: ${(e as Error).message}`);
    const truncated = e.failure === 'truncated';
    throw new DecodeError(
      truncated ? ReasonCode.DECODE_TRUNCATED : ReasonCode.DECODE_MALFORMED,
      `${writer.eventType} payload ${truncated ? 'ends early' : 'does not decode'}: ${e.message}`,
      e.field,
    );
  }
  if (end !== buf.length) {
    throw new DecodeError(ReasonCode.DECODE_MALFORMED, `${writer.eventType} payload has ${buf.length - end} unexpected trailing bytes`);
  }
}

/** Schema-level validation with the offending field's path in the error. */
export function assertSchemaValid(entry: SchemaEntry, value: unknown): void {
  let firstPath: string | undefined;
  let got: unknown;
  const ok = entry.avroType.isValid(value, {
    noUndeclaredFields: true,
    errorHook: (pathParts: string[], v: unknown) => {
      if (firstPath === undefined) {
        firstPath = pathParts.join('.') || '(root)';
        got = v;
      }
    },
  });
  if (!ok) {
    throw new ValidationError(`${entry.eventType}.${firstPath}`, `does not match the schema (got ${describe(got)})`);
  }
}

function describe(v: unknown): string {
  if (v === undefined) return 'undefined: field missing';
  if (typeof v === 'string') return v.length > 40 ? `a string of ${v.length} chars` : JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  if (Array.isArray(v)) return `an array of ${v.length}`;
  return typeof v;
}

/**
 * A decoded record as plain data: avsc returns instances of generated record
 * classes, which strict deep-equality (and structuredClone) treat differently
 * from object literals. Buffers are kept.
 */
export function toPlain<T>(value: T): T {
  if (value === null || typeof value !== 'object' || Buffer.isBuffer(value)) return value;
  if (Array.isArray(value)) return value.map((v: unknown) => toPlain(v)) as T;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = toPlain(v);
  return out as T;
}

/** The AgentOutput inside an active-set member (its original bytes), checked against the member's summary. */
export function decodeMemberOutput(codec: EventCodec, member: { outputId: string; output: Buffer }): EventMap['AgentOutput'] {
  const output = codec.decodeAs('AgentOutput', member.output);
  if (output.outputId !== member.outputId) {
    throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `member ${member.outputId} carries the bytes of output ${output.outputId}`);
  }
  return output;
}
