import type { EventCodec } from '@srpo/events';
import type { StoredEpisode, StoredOutput, StoredTransition } from './active-set-state';
import type { ErasedContent } from './erased-content';

/*
 * The set stage's state under erasures (docs/erasure.md): outputs sealed under an erased key
 * leave `sourced` (their bytes leave local state; the changelog never held them) and are
 * remembered by id in `erasedOutputIds`, so that the set holding one is settled as erased
 * instead of waiting for a member that will never be readable.
 */

/** The key an output was sealed under, null in the clear. State written before keys were kept: read from its bytes. */
export function keyIdOf(o: StoredOutput, codec: EventCodec): string | null {
  if (o.keyId !== undefined) return o.keyId;
  if (!o.raw) return null;
  return codec.decodeAs('AgentOutput', o.raw).sealed?.keyId ?? null;
}

/** Moves the episode's outputs sealed under erased keys out of `sourced` into `erasedOutputIds`; how many moved. */
export function dropErasedOutputs(ep: StoredEpisode, erased: ErasedContent, codec: EventCodec): number {
  const gone = ep.sourced.filter((o) => {
    const keyId = keyIdOf(o, codec);
    return keyId !== null && erased.isErasedKey(keyId);
  });
  if (gone.length === 0) return 0;
  ep.sourced = ep.sourced.filter((o) => !gone.includes(o));
  ep.erasedOutputIds = [...(ep.erasedOutputIds ?? []), ...gone.map((o) => o.outputId)];
  return gone.length;
}

/** Whether one of the set's members is erased (arrived under an erased key, or dropped by a sweep). */
export function holdsErasedMember(ep: StoredEpisode, st: StoredTransition): boolean {
  const erased = ep.erasedOutputIds;
  return erased !== undefined && erased.length > 0 && st.transition.consumedOutputIds.some((id) => erased.includes(id));
}
