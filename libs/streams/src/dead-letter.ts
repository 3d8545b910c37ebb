import { createHash } from 'crypto';
import { ErrorCode, SrpoError } from '@srpo/core';
import type { DeadLetter, EventCodec, KafkaCoordinates } from '@srpo/events';

/** Default bound of a dead-letter record: under the catalog's 4 MiB max.message.bytes. */
export const DEFAULT_MAX_DEAD_LETTER_BYTES = 3 * 1024 * 1024;

export function deadLetterOf(
  original: { key: Buffer | null; value: Buffer | null; source: KafkaCoordinates },
  reasonCode: string,
  reason: string,
  processor: string,
  details: Record<string, string>,
  deadLetteredAtMs: number,
): DeadLetter {
  return {
    originalKey: original.key,
    originalValue: original.value,
    source: original.source,
    reasonCode,
    reason: reason.length > 2000 ? reason.slice(0, 2000) + '…' : reason,
    processor,
    details,
    deadLetteredAtMs,
  };
}

/**
 * Encodes a dead letter and never fails for size: a dead letter that cannot be
 * written would fail its transaction on every redelivery and stop the partition
 * for good. It carries the original message, which may be over the codec's input
 * limit (that can be why it is dead), so the codec's limit is replaced by
 * `maxBytes`; past that the bytes are left out, and `details` give their size and
 * SHA-256 (they stay readable at `source`, topics keep history).
 */
export function encodeDeadLetter(codec: EventCodec, dl: DeadLetter, maxBytes: number = DEFAULT_MAX_DEAD_LETTER_BYTES): { bytes: Buffer; omitted: boolean } {
  try {
    return { bytes: codec.encode('DeadLetter', dl, { maxBytes }), omitted: false };
  } catch (e) {
    if (!(e instanceof SrpoError) || e.code !== ErrorCode.PAYLOAD_TOO_LARGE || dl.originalValue === null) throw e;
    const original = dl.originalValue;
    const details = {
      ...dl.details,
      originalValueOmitted: 'true',
      originalBytes: String(original.length),
      originalSha256: createHash('sha256').update(original).digest('hex'),
    };
    return { bytes: codec.encode('DeadLetter', { ...dl, originalValue: null, details }, { maxBytes }), omitted: true };
  }
}
