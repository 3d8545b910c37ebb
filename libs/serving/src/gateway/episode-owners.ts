import { ValidationError } from '@srpo/core';
import { DEFAULT_EVENT_LIMITS } from '@srpo/events';
import { OpenAiError } from '../openai-protocol';

export interface EpisodeOwnersOptions {
  /** Episodes remembered at most; past it the least recently used one is forgotten. */
  maxEpisodes: number;
  /** An episode untouched this long is forgotten. */
  idleTtlMs: number;
  clock?: () => number;
}

/**
 * Which API key owns which episode: the first key whose request for the episode the gateway
 * accepted. Later requests of the same key go on in it (multi-turn); another key's get 403, so
 * no key can write outputs, transitions or an outcome into another key's episode.
 *
 * The memory is bounded and in the process: an LRU of `maxEpisodes` entries (one entry is the
 * episode id, at most 256 characters, and a 12-character key id), each forgotten after
 * `idleTtlMs` without a request. A forgotten episode, and every episode after a restart, is
 * unowned again: the next key to touch it becomes its owner. The guard protects episodes
 * while they are being played, which is when outputs could collide.
 */
export class EpisodeOwners {
  /** episode id → owner; a Map's insertion order is the LRU order (a touch re-inserts). */
  private readonly owners = new Map<string, { keyId: string; touchedAtMs: number }>();
  private readonly clock: () => number;

  constructor(private readonly o: EpisodeOwnersOptions) {
    if (!(o.maxEpisodes >= 1)) throw new ValidationError('maxEpisodes', `must be at least 1, got ${o.maxEpisodes}`);
    if (!(o.idleTtlMs >= 1)) throw new ValidationError('idleTtlMs', `must be at least 1, got ${o.idleTtlMs}`);
    this.clock = o.clock ?? Date.now;
  }

  get size(): number {
    return this.owners.size;
  }

  /**
   * Lets `keyId` act on `episodeId`, making it the owner when the episode has none; refuses
   * (403 `episode_not_owned`, naming `param`) when another key owns it.
   */
  claim(episodeId: string, keyId: string, param: string): void {
    // Longer ids are refused by the event validation anyway; checked here so that no entry is larger.
    if (episodeId.length > DEFAULT_EVENT_LIMITS.maxIdLength)
      throw new OpenAiError(400, `${param}: is ${episodeId.length} characters long; the limit is ${DEFAULT_EVENT_LIMITS.maxIdLength}`, param, 'invalid_value');
    const now = this.clock();
    this.expire(now);
    const owner = this.owners.get(episodeId);
    if (owner && owner.keyId !== keyId)
      throw new OpenAiError(
        403,
        `The episode '${episodeId}' belongs to another API key; an episode can only be continued with the key that started it.`,
        param,
        'episode_not_owned',
      );
    this.owners.delete(episodeId);
    this.owners.set(episodeId, { keyId, touchedAtMs: now });
    if (this.owners.size > this.o.maxEpisodes) this.owners.delete(this.owners.keys().next().value as string);
  }

  /** Forgets the idle episodes; they sit at the front of the LRU order, so this stops at the first live one. */
  private expire(now: number): void {
    for (const [episodeId, owner] of this.owners) {
      if (now - owner.touchedAtMs < this.o.idleTtlMs) return;
      this.owners.delete(episodeId);
    }
  }
}
