import { ErrorCode, SrpoError } from '@srpo/core';
import { startFakeSchemaRegistry as startRegistry } from '@srpo/testing';
import { DecodeError, EventCodec, SchemaSet } from './event-codec';
import { ReasonCode } from './reason-codes';
import { sampleEvents } from './sample-events';
import { confluentFrame, confluentSchemaId, SchemaRegistryClient } from './schema-registry';

describe('Confluent wire format', () => {
  it('frames as 0x00, a big-endian schema id, then the Avro body', () => {
    const framed = confluentFrame(0x01020304, Buffer.from([9, 8]));
    expect([...framed]).toEqual([0, 1, 2, 3, 4, 9, 8]);
    expect(confluentSchemaId(framed)).toBe(0x01020304);
    expect(confluentSchemaId(Buffer.from([0xc3, 0x01, 0, 0, 0]))).toBeUndefined();
  });

  it('encodes with registry ids and decodes them back, in another process-like codec', async () => {
    const registry = await startRegistry();
    try {
      const writer = new EventCodec(SchemaSet.fromDirectory(), { registry: new SchemaRegistryClient({ url: registry.url }) });
      await writer.useRegistry();
      const sample = sampleEvents(5);
      const bytes = writer.encode('Transition', sample.Transition);
      expect(bytes[0]).toBe(0);
      const id = confluentSchemaId(bytes) as number;
      expect(id).toBeGreaterThanOrEqual(100);
      expect(registry.requests.some((r) => r.startsWith('POST /subjects/dev.srpo.events.Transition/versions application/vnd.schemaregistry.v1+json'))).toBe(
        true,
      );

      // A reader that has never seen the id must prefetch it first.
      const reader = new EventCodec(SchemaSet.fromDirectory(), { registry: new SchemaRegistryClient({ url: registry.url }) });
      expect(() => reader.decode(bytes)).toThrow(DecodeError);
      await reader.prefetch([bytes]);
      expect(reader.decodeAs('Transition', bytes)).toEqual(sample.Transition);
      expect(registry.requests).toContain(`GET /schemas/ids/${id} application/vnd.schemaregistry.v1+json`);

      // A codec without a registry refuses the framing with a reason, as it would dead-letter it.
      try {
        new EventCodec().decode(bytes);
        throw new Error('decoded without a registry');
      } catch (e) {
        expect((e as DecodeError).reasonCode).toBe(ReasonCode.UNKNOWN_SCHEMA);
      }
      // An id the registry does not have stays unknown.
      const unknown = confluentFrame(999, bytes.subarray(5));
      await reader.prefetch([unknown]);
      expect(() => reader.decode(unknown)).toThrow(/schema registry id 999 is unknown/);
    } finally {
      registry.server.close();
    }
  });

  it('sends basic auth and reports refused credentials as UNAUTHORIZED', async () => {
    const expected = `Basic ${Buffer.from('svc:secret').toString('base64')}`;
    const registry = await startRegistry(expected);
    try {
      const good = new SchemaRegistryClient({ url: registry.url, basicAuth: { username: 'svc', password: 'secret' } });
      expect(await good.register('s', { type: 'string' })).toBe(100);
      const bad = new SchemaRegistryClient({ url: registry.url, basicAuth: { username: 'svc', password: 'wrong' } });
      await expect(bad.register('s', { type: 'string' })).rejects.toMatchObject({ code: ErrorCode.UNAUTHORIZED });
    } finally {
      registry.server.close();
    }
  });

  it('reports an unreachable registry as a retriable error', async () => {
    const client = new SchemaRegistryClient({ url: 'http://127.0.0.1:1', timeoutMs: 2000 });
    const error = await client.schemaById(1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SrpoError);
    expect((error as SrpoError).retriable).toBe(true);
  });
});
