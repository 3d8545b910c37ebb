import type { DeadLetter, KafkaCoordinates } from '@srpo/events';

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
