import { createHash } from 'crypto';
import { EventCodec, ReasonCode } from '@srpo/events';
import { deadLetterOf, encodeDeadLetter } from './dead-letter';

describe('encodeDeadLetter', () => {
  // The same 64 KiB input limit as the corpus runs: the message is dead because it is too large.
  const codec = new EventCodec(undefined, { maxPayloadBytes: 64 * 1024 });
  const source = { topic: 't.episode-outcomes', partition: 0, offset: 7 };
  const big = Buffer.alloc(70 * 1024, 0x61);
  const dl = deadLetterOf({ key: Buffer.from('ep'), value: big, source }, ReasonCode.PAYLOAD_TOO_LARGE, 'too large', 'test', {}, 1);

  it('carries an original message over the input limit', () => {
    expect(() => codec.encode('DeadLetter', dl)).toThrow(/exceeds the limit of 65536 B/);
    const { bytes, omitted } = encodeDeadLetter(codec, dl);
    expect(omitted).toBe(false);
    // Decoding needs a codec whose limit admits the dead letter.
    const back = new EventCodec(undefined, { maxPayloadBytes: 1024 * 1024 }).decodeAs('DeadLetter', bytes);
    expect(Buffer.compare(back.originalValue as Buffer, big)).toBe(0);
  });

  it('leaves out bytes past its own bound and says where they are', () => {
    const { bytes, omitted } = encodeDeadLetter(codec, dl, 4096);
    expect(omitted).toBe(true);
    expect(bytes.length).toBeLessThanOrEqual(4096);
    const back = codec.decodeAs('DeadLetter', bytes);
    expect(back.originalValue).toBeNull();
    expect(back.source).toEqual(source);
    expect(back.details).toEqual({
      originalValueOmitted: 'true',
      originalBytes: String(70 * 1024),
      originalSha256: createHash('sha256').update(big).digest('hex'),
    });
  });
});
