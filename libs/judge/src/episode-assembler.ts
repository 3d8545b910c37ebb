import type { Transition } from '@srpo/events';
import type { JudgedText } from './judge-input';

export interface AssemblerLimits {
  /** Episodes held at once; one more drops the one read first (`pending_full`). */
  maxEpisodes: number;
  /** Event time an episode may wait for its done transition or its listed outputs after its last record (`expired`). */
  ttlMs: number;
}

/** An episode whose done transition and listed outputs have all been read. */
export interface ReadyEpisode {
  episodeId: string;
  done: Transition;
  /** The judged outputs (of the chosen policies), in step order. */
  outputs: JudgedText[];
}

export interface DroppedEpisode {
  episodeId: string;
  reason: 'pending_full' | 'expired';
}

interface Held {
  /** Offsets on agent-outputs of every output read (any policy): what the committed position must not pass. */
  outputOffsets: Map<string, number>;
  texts: JudgedText[];
  /** Output ids the episode's transitions list. */
  listed: Set<string>;
  done?: { transition: Transition; offset: number };
  lastEventTimeMs: number;
}

/**
 * The episodes of one input partition (`agent-outputs` and `transitions` are co-partitioned by
 * episode id) until they can be judged: when the done transition has been read and every output
 * the episode's transitions list has been read too (outputs and transitions come on different
 * topics, in no fixed order). Pure: no Kafka, no clock; time is the largest event time read.
 *
 * It also says how far each topic's consumer position may be committed: not past the first
 * record an episode still held needs (its outputs; a done transition still waiting for outputs).
 * Non-done transitions are not held: after a restart the outputs they listed are no longer
 * waited for, only those the done transition lists.
 */
export class EpisodeAssembler {
  private readonly episodes = new Map<string, Held>();
  private streamTimeMs = 0;
  private lastOutputOffset = -1;
  private lastTransitionOffset = -1;

  constructor(private readonly limits: AssemblerLimits) {}

  get size(): number {
    return this.episodes.size;
  }

  /** An output at `offset`; `text` is its judged text, or null when its policy is not judged (its id still counts for completeness). */
  addOutput(offset: number, episodeId: string, outputId: string, eventTimeMs: number, text: JudgedText | null): DroppedEpisode[] {
    this.lastOutputOffset = Math.max(this.lastOutputOffset, offset);
    const { held, dropped } = this.episode(episodeId, eventTimeMs);
    if (!held.outputOffsets.has(outputId)) {
      held.outputOffsets.set(outputId, offset);
      if (text) held.texts.push(text);
    }
    return dropped;
  }

  addTransition(offset: number, t: Transition): DroppedEpisode[] {
    this.lastTransitionOffset = Math.max(this.lastTransitionOffset, offset);
    const { held, dropped } = this.episode(t.episodeId, t.eventTimeMs);
    for (const id of t.consumedOutputIds) held.listed.add(id);
    if (t.done && !held.done) held.done = { transition: t, offset };
    return dropped;
  }

  /** Removes and returns the episodes ready to judge. */
  takeReady(): ReadyEpisode[] {
    const ready: ReadyEpisode[] = [];
    for (const [episodeId, held] of this.episodes) {
      if (!held.done || [...held.listed].some((id) => !held.outputOffsets.has(id))) continue;
      this.episodes.delete(episodeId);
      const outputs = [...held.texts].sort((a, b) => a.step - b.step || a.outputId.localeCompare(b.outputId));
      ready.push({ episodeId, done: held.done.transition, outputs });
    }
    return ready;
  }

  /** Drops the episodes whose last record is more than `ttlMs` of event time behind the newest record read. */
  expire(): DroppedEpisode[] {
    const dropped: DroppedEpisode[] = [];
    for (const [episodeId, held] of this.episodes) {
      if (held.lastEventTimeMs + this.limits.ttlMs < this.streamTimeMs) {
        this.episodes.delete(episodeId);
        dropped.push({ episodeId, reason: 'expired' });
      }
    }
    return dropped;
  }

  /** Forgets an episode (already judged, found on the outcome topic). */
  forget(episodeId: string): void {
    this.episodes.delete(episodeId);
  }

  /**
   * The next offset of each topic that a restart must read from: the first record a held
   * episode needs, else one past the last record read; undefined before any record of the topic.
   */
  safeOffsets(): { outputs?: number; transitions?: number } {
    let outputs = this.lastOutputOffset + 1;
    let transitions = this.lastTransitionOffset + 1;
    for (const held of this.episodes.values()) {
      for (const o of held.outputOffsets.values()) outputs = Math.min(outputs, o);
      if (held.done) transitions = Math.min(transitions, held.done.offset);
    }
    return {
      ...(this.lastOutputOffset >= 0 ? { outputs } : {}),
      ...(this.lastTransitionOffset >= 0 ? { transitions } : {}),
    };
  }

  private episode(episodeId: string, eventTimeMs: number): { held: Held; dropped: DroppedEpisode[] } {
    if (Number.isFinite(eventTimeMs)) this.streamTimeMs = Math.max(this.streamTimeMs, eventTimeMs);
    let held = this.episodes.get(episodeId);
    const dropped: DroppedEpisode[] = [];
    if (!held) {
      // A Map iterates in insertion order: the first key is the episode read first.
      while (this.episodes.size >= this.limits.maxEpisodes) {
        const oldest = this.episodes.keys().next().value as string;
        this.episodes.delete(oldest);
        dropped.push({ episodeId: oldest, reason: 'pending_full' });
      }
      held = { outputOffsets: new Map(), texts: [], listed: new Set(), lastEventTimeMs: eventTimeMs };
      this.episodes.set(episodeId, held);
    }
    held.lastEventTimeMs = Math.max(held.lastEventTimeMs, eventTimeMs);
    return { held, dropped };
  }
}
