import { ErrorCode, SrpoError } from '@srpo/core';
import { SourceBacked, sourcedItems, StoreSerde } from './key-value-store';

/*
 * A persistent store's value as the local copy holds it. A change of this layout must bump
 * LOCAL_FORMAT (local-task-state.ts), so that copies of the old layout are rebuilt from the
 * changelog.
 */

/** [u32 length][changelog bytes] then, source-backed, per held record [i32 length or -1][bytes]. */
export function localRecordOf(changelogBytes: Buffer, value: unknown, sourceBacked: boolean): Buffer {
  const parts: Buffer[] = [u32(changelogBytes.length), changelogBytes];
  if (sourceBacked) {
    for (const item of sourcedItems(value as SourceBacked)) {
      if (item.raw) parts.push(i32(item.raw.length), item.raw);
      else parts.push(i32(-1));
    }
  }
  return Buffer.concat(parts);
}

/** The value of a local record, with the held records' original bytes put back (source-backed). */
export function valueOfLocalRecord<V>(bytes: Buffer, serde: StoreSerde<V>, sourceBacked: boolean, store: string): V {
  const n = bytes.readUInt32LE(0);
  const v = serde.deserialize(bytes.subarray(4, 4 + n));
  if (sourceBacked) {
    let at = 4 + n;
    for (const item of sourcedItems(v as unknown as SourceBacked)) {
      if (at + 4 > bytes.length) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `store ${store}: local record shorter than its held records`);
      const len = bytes.readInt32LE(at);
      at += 4;
      if (len >= 0) {
        // A copy: LMDB's buffer is reused by the next read.
        item.raw = Buffer.from(bytes.subarray(at, at + len));
        at += len;
      }
    }
  }
  return v;
}

function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE(n, 0);
  return b;
}

function i32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeInt32LE(n, 0);
  return b;
}
