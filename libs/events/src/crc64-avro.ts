/**
 * CRC-64-AVRO: the 64-bit Rabin fingerprint the Avro specification uses for
 * single-object encoding ("Schema Fingerprints", Avro 1.11 spec). avsc offers only
 * md5/sha256 fingerprints, so the table-driven algorithm from the spec is here.
 */
const EMPTY = 0xc15d213aa4d7a795n;
const MASK64 = 0xffffffffffffffffn;

const TABLE: bigint[] = (() => {
  const table = new Array<bigint>(256);
  for (let i = 0; i < 256; i++) {
    let fp = BigInt(i);
    for (let j = 0; j < 8; j++) {
      fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n) & MASK64);
    }
    table[i] = fp;
  }
  return table;
})();

/** Fingerprint of `data` (normally the UTF-8 parsing canonical form of a schema). */
export function crc64Avro(data: Uint8Array): bigint {
  let fp = EMPTY;
  for (const byte of data) {
    fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(byte)) & 0xffn)];
  }
  return fp;
}

/** The fingerprint as the 8 little-endian bytes that follow `C3 01` in the header. */
export function fingerprintBytes(fp: bigint): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(fp);
  return out;
}

export function fingerprintHex(fp: bigint): string {
  return fingerprintBytes(fp).toString('hex');
}
