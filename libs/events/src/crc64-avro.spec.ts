import * as avro from 'avsc';
import { crc64Avro, fingerprintBytes } from './crc64-avro';

// Published vectors from Apache Avro's share/test/data/schema-tests.txt (signed 64-bit).
const VECTORS: [schema: unknown, canonical: string, signed: bigint][] = [
  ['null', '"null"', 7195948357588979594n],
  ['boolean', '"boolean"', -6970731678124411036n],
  ['int', '"int"', 8247732601305521295n],
  [{ type: 'fixed', name: 'foo', size: 15 }, '{"name":"foo","type":"fixed","size":15}', 1756455273707447556n],
  [
    { type: 'record', name: 'foo', fields: [{ name: 'f1', type: 'boolean' }] },
    '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}',
    7843277075252814651n,
  ],
];

describe('crc64Avro', () => {
  it.each(VECTORS)('matches the Avro test vector for %j', (schema, canonical, signed) => {
    expect(JSON.stringify(avro.Type.forSchema(schema as avro.Schema).schema())).toBe(canonical);
    expect(BigInt.asIntN(64, crc64Avro(Buffer.from(canonical)))).toBe(signed);
  });

  it('writes the fingerprint little-endian', () => {
    // 7195948357588979594 = 0x63dd24e7cc258f8a
    expect(fingerprintBytes(7195948357588979594n).toString('hex')).toBe('8a8f25cce724dd63');
  });
});
