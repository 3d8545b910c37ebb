import type { ActiveSet, AgentOutput, Erasure, EventCodec } from '@srpo/events';

/**
 * What the materializer knows of erasures (docs/erasure.md): the content keys `srpo erase`
 * deleted, read from the erasures topic. Content sealed under one of them is erased: the set
 * stage never emits a set holding it, and both stages drop such sets from their state.
 *
 * Only sealed content can be erased: an output written in the clear stays readable in the log
 * whatever the store holds, so it is no erasure's (the learner, which opens content with the
 * store's keys, follows the same rule).
 */
export interface ErasedContent {
  /** Grows with every erasure read: a task sweeps its state when it has changed. */
  readonly generation: number;
  /** Whether the key `keyId` was deleted. */
  isErasedKey(keyId: string): boolean;
  /**
   * Whether an erasure named one of these subjects or this episode: only then can a set hold
   * erased content (a key is of one subject and episode), so only then are its members decoded.
   */
  mayHold(subjectIds: readonly string[], episodeId: string): boolean;
}

/** The erasures read so far; `add` is idempotent (an erasure read twice changes nothing). */
export class ErasedContentTable implements ErasedContent {
  private readonly keyIds = new Set<string>();
  private readonly subjects = new Set<string>();
  private readonly episodes = new Set<string>();
  private readonly erasureIds = new Set<string>();
  private gen = 0;

  get generation(): number {
    return this.gen;
  }

  /** Erasures read (distinct ids). */
  get size(): number {
    return this.erasureIds.size;
  }

  add(erasure: Erasure): void {
    const before = this.keyIds.size + this.subjects.size + this.episodes.size;
    for (const k of erasure.keyIds) this.keyIds.add(k);
    (erasure.scope === 'subject' ? this.subjects : this.episodes).add(erasure.target);
    this.erasureIds.add(erasure.erasureId);
    if (this.keyIds.size + this.subjects.size + this.episodes.size !== before) this.gen++;
  }

  isErasedKey(keyId: string): boolean {
    return this.keyIds.has(keyId);
  }

  mayHold(subjectIds: readonly string[], episodeId: string): boolean {
    if (this.keyIds.size === 0) return false;
    return this.episodes.has(episodeId) || subjectIds.some((s) => this.subjects.has(s));
  }
}

/** Whether `output` is sealed under an erased key. */
export function isErasedOutput(output: Pick<AgentOutput, 'sealed'>, erased: ErasedContent): boolean {
  return output.sealed !== null && output.sealed !== undefined && erased.isErasedKey(output.sealed.keyId);
}

/**
 * Whether a set holds erased content: one of its members sealed under an erased key. Members
 * are decoded only when an erasure named the set's subjects or episode (`mayHold`).
 */
export function setHoldsErased(set: ActiveSet, erased: ErasedContent, codec: EventCodec): boolean {
  if (!erased.mayHold(set.subjectIds ?? [], set.episodeId)) return false;
  return set.members.some((m) => isErasedOutput(codec.decodeAs('AgentOutput', m.output), erased));
}

/**
 * Per task, the generation of the erasures its state was last swept for. Keyed by the task's
 * stores object: a task rebuilt after a rebalance or restart has new stores and sweeps again,
 * which finds nothing left to drop when its last sweep was committed.
 */
export class SweptGenerations {
  private readonly swept = new WeakMap<object, number>();

  /** True once per new generation per stores object; marks it swept. */
  due(stores: object, erased: ErasedContent | undefined): boolean {
    if (!erased || erased.generation === 0 || this.swept.get(stores) === erased.generation) return false;
    this.swept.set(stores, erased.generation);
    return true;
  }
}
