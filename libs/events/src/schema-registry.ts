import type * as avro from 'avsc';
import { ErrorCode, SrpoError } from '@srpo/core';

/** Confluent wire format: magic byte 0, 4-byte big-endian schema id, Avro body. */
export const CONFLUENT_MAGIC = 0x00;
export const CONFLUENT_HEADER_BYTES = 5;

export function confluentFrame(schemaId: number, body: Buffer): Buffer {
  const header = Buffer.alloc(CONFLUENT_HEADER_BYTES);
  header[0] = CONFLUENT_MAGIC;
  header.writeUInt32BE(schemaId, 1);
  return Buffer.concat([header, body]);
}

/** The schema id of a Confluent-framed message, or undefined when `buf` is not one. */
export function confluentSchemaId(buf: Buffer): number | undefined {
  if (buf.length < CONFLUENT_HEADER_BYTES || buf[0] !== CONFLUENT_MAGIC) return undefined;
  return buf.readUInt32BE(1);
}

export interface SchemaRegistryOptions {
  /** Base URL, e.g. http://registry:8081 */
  url: string;
  basicAuth?: { username: string; password: string };
  timeoutMs?: number;
}

/**
 * The two calls of the Confluent Schema Registry REST API this project needs:
 * register a schema under a subject (`POST /subjects/{subject}/versions`) and
 * fetch a schema by id (`GET /schemas/ids/{id}`). Subjects use the record-name
 * strategy (`dev.srpo.events.AgentOutput`), so one event type has one subject
 * whatever topic it is on. Results are cached; ids are immutable in a registry.
 */
export class SchemaRegistryClient {
  private readonly byId = new Map<number, avro.Schema>();
  private readonly idOf = new Map<string, number>();

  constructor(private readonly options: SchemaRegistryOptions) {}

  async register(subject: string, schema: avro.Schema): Promise<number> {
    const key = `${subject}\n${JSON.stringify(schema)}`;
    const cached = this.idOf.get(key);
    if (cached !== undefined) return cached;
    const body = await this.request(`/subjects/${encodeURIComponent(subject)}/versions`, {
      method: 'POST',
      body: JSON.stringify({ schemaType: 'AVRO', schema: JSON.stringify(schema) }),
    });
    const id = (body as { id?: unknown }).id;
    if (typeof id !== 'number') throw new SrpoError(ErrorCode.UNAVAILABLE, `schema registry: no id in the answer to registering ${subject}`);
    this.idOf.set(key, id);
    this.byId.set(id, schema);
    return id;
  }

  async schemaById(id: number): Promise<avro.Schema> {
    const cached = this.byId.get(id);
    if (cached) return cached;
    const body = await this.request(`/schemas/ids/${id}`, { method: 'GET' });
    const text = (body as { schema?: unknown }).schema;
    if (typeof text !== 'string') throw new SrpoError(ErrorCode.UNKNOWN_SCHEMA, `schema registry: no schema for id ${id}`);
    const schema = JSON.parse(text) as avro.Schema;
    this.byId.set(id, schema);
    return schema;
  }

  private async request(path: string, init: { method: string; body?: string }): Promise<unknown> {
    const headers: Record<string, string> = { 'Content-Type': 'application/vnd.schemaregistry.v1+json', Accept: 'application/vnd.schemaregistry.v1+json' };
    if (this.options.basicAuth) {
      headers.Authorization = `Basic ${Buffer.from(`${this.options.basicAuth.username}:${this.options.basicAuth.password}`).toString('base64')}`;
    }
    let res: Response;
    try {
      res = await fetch(new URL(path, this.options.url), { ...init, headers, signal: AbortSignal.timeout(this.options.timeoutMs ?? 10_000) });
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `schema registry at ${this.options.url} unreachable: ${(e as Error).message}`, { retriable: true });
    }
    const text = await res.text();
    if (res.status === 404) throw new SrpoError(ErrorCode.UNKNOWN_SCHEMA, `schema registry: ${path} not found`);
    if (res.status === 401 || res.status === 403) throw new SrpoError(ErrorCode.UNAUTHORIZED, `schema registry refused the credentials (${res.status})`);
    if (!res.ok)
      throw new SrpoError(ErrorCode.UNAVAILABLE, `schema registry answered ${res.status} to ${init.method} ${path}: ${text.slice(0, 200)}`, {
        retriable: res.status >= 500,
      });
    return JSON.parse(text) as unknown;
  }
}
