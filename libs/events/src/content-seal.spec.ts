import { randomBytes } from 'crypto';
import { ValidationError } from '@srpo/core';
import { openOutput, SealOpenError, sealOutput, tokensOfPlaintext } from './content-seal';
import { EventCodec } from './event-codec';
import type { AgentOutput } from './event-types';
import { validateAgentOutput } from './event-validation';
import { sampleEvents } from './sample-events';

const output = (patch: Partial<AgentOutput> = {}): AgentOutput => ({
  ...sampleEvents(1).AgentOutput,
  outputId: 'ep-1/o1',
  episodeId: 'ep-1',
  subjectId: 'user-7',
  contextTokenIds: [1, 2, 300],
  responseTokenIds: [5, 70000],
  behaviourLogProbs: [-0.5, -1.25],
  lossMask: [true, true],
  ...patch,
});
const KEY = { keyId: 'k1', key: Buffer.from(Array.from({ length: 32 }, (_, i) => i)) };
const NONCE = Buffer.from(Array.from({ length: 12 }, (_, i) => i));

describe('sealOutput / openOutput (aes-256-gcm/v1)', () => {
  it('writes the bytes an independent AES-GCM implementation writes for the documented layout', () => {
    // Python `cryptography` 48: AESGCM(bytes(range(32))).encrypt(bytes(range(12)), pt, aad) with
    // pt = struct.pack('<I', 3) + struct.pack('<5i', 1, 2, 300, 5, 70000) and
    // aad = '\0'.join(['srpo-sealed/v1', 'ep-1/o1', 'ep-1', 'user-7', 'k1']).encode().
    const expected = '4402d61bc4e5c21b8f41978b9de8786d86d68734806a5e7c96910903767f05c0c5dbdcb8fd515e44';
    const sealed = sealOutput(output(), KEY, NONCE);
    expect(sealed.sealed?.ciphertext.toString('hex')).toBe(expected);
    expect(sealed.sealed).toMatchObject({ scheme: 'aes-256-gcm/v1', keyId: 'k1' });
    expect(sealed.contextTokenIds).toEqual([]);
    expect(sealed.responseTokenIds).toEqual([]);
    expect(sealed.behaviourLogProbs).toEqual([-0.5, -1.25]);
  });

  it('opens to the original ids, through an Avro round trip, and a sealed output passes validation', () => {
    const codec = new EventCodec();
    const k2 = { keyId: 'k2', key: randomBytes(32) };
    const sealed = sealOutput(output(), k2);
    validateAgentOutput(sealed);
    const decoded = codec.decodeAs('AgentOutput', codec.encode('AgentOutput', sealed));
    expect(decoded.sealed?.keyId).toBe('k2');
    expect(openOutput(decoded, k2.key)).toEqual({ ...output(), sealed: null });
    expect(openOutput(output(), undefined)).toEqual(output());
  });

  it('refuses a ciphertext moved onto another event, a changed byte, a wrong or missing key', () => {
    const sealed = sealOutput(output(), KEY, NONCE);
    expect(openOutput(sealed, KEY.key)).toEqual({ ...output(), sealed: null });
    expect(() => openOutput({ ...sealed, outputId: 'ep-1/o2' }, KEY.key)).toThrow(/does not open with key k1/);
    expect(() => openOutput({ ...sealed, subjectId: 'user-8' }, KEY.key)).toThrow(SealOpenError);
    const flipped = Buffer.from(sealed.sealed!.ciphertext);
    flipped[0] ^= 1;
    expect(() => openOutput({ ...sealed, sealed: { ...sealed.sealed!, ciphertext: flipped } }, KEY.key)).toThrow(SealOpenError);
    expect(() => openOutput(sealed, randomBytes(32))).toThrow(SealOpenError);
    expect(() => openOutput(sealed, undefined)).toThrow(/no key k1 to open output ep-1\/o1/);
    expect(() => sealOutput(sealed, KEY)).toThrow(ValidationError);
  });

  it('bounds the plaintext count by its bytes', () => {
    const bytes = Buffer.alloc(12);
    bytes.writeUInt32LE(3, 0);
    expect(() => tokensOfPlaintext(bytes)).toThrow(/claims 3 context tokens but holds 2 ids/);
    expect(() => tokensOfPlaintext(Buffer.alloc(6))).toThrow(/whole number of int32s/);
  });

  it('validation names the sealed field that is wrong', () => {
    const sealed = sealOutput(output(), KEY, NONCE);
    expect(() => validateAgentOutput({ ...sealed, responseTokenIds: [1, 2] })).toThrow(/^AgentOutput.sealed: is set/);
    expect(() => validateAgentOutput({ ...sealed, sealed: { ...sealed.sealed!, scheme: 'rot13' } })).toThrow(/^AgentOutput.sealed.scheme/);
    expect(() => validateAgentOutput({ ...sealed, sealed: { ...sealed.sealed!, nonce: Buffer.alloc(8) } })).toThrow(/^AgentOutput.sealed.nonce/);
    expect(() => validateAgentOutput({ ...sealed, sealed: { ...sealed.sealed!, ciphertext: Buffer.alloc(21) } })).toThrow(/^AgentOutput.sealed.ciphertext/);
    expect(() => validateAgentOutput({ ...sealed, behaviourLogProbs: [-1, -1, -1, -1, -1, -1], lossMask: Array(6).fill(true) })).toThrow(
      /cannot hold 6 response tokens/,
    );
    expect(() => validateAgentOutput(sealed, { maxIdLength: 256, maxStep: 10, maxResponseTokens: 10, maxContextTokens: 2, maxCardinality: 4 })).toThrow(
      /holds 3 context tokens; the limit is 2/,
    );
  });
});
