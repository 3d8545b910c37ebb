import type { OpenAiError } from '../openai-protocol';
import { EpisodeOwners } from './episode-owners';

describe('episode owners', () => {
  let now = 0;
  const owners = (maxEpisodes = 3, idleTtlMs = 1000) => new EpisodeOwners({ maxEpisodes, idleTtlMs, clock: () => now });
  const claim = (o: EpisodeOwners, episode: string, key: string): unknown => {
    try {
      o.claim(episode, key, 'episodeId');
      return 'ok';
    } catch (e) {
      const err = e as OpenAiError;
      return [err.status, err.code];
    }
  };
  beforeEach(() => {
    now = 0;
  });

  it('the first key owns an episode and goes on in it; another key gets 403 episode_not_owned naming the field', () => {
    const o = owners();
    expect([claim(o, 'ep', 'key-a'), claim(o, 'ep', 'key-a'), claim(o, 'ep', 'key-b'), claim(o, 'other', 'key-b')]).toEqual([
      'ok',
      'ok',
      [403, 'episode_not_owned'],
      'ok',
    ]);
    expect(() => o.claim('ep', 'key-b', 'X-SRPO-Episode')).toThrow(expect.objectContaining({ param: 'X-SRPO-Episode', type: 'permission_error' }));
  });

  it('forgets an episode idle for the TTL (a touch keeps it), after which the next key owns it', () => {
    const o = owners(10, 1000);
    claim(o, 'ep', 'key-a');
    now = 900;
    claim(o, 'ep', 'key-a');
    now = 1800;
    expect(claim(o, 'ep', 'key-b')).toEqual([403, 'episode_not_owned']);
    now = 2900;
    expect(claim(o, 'ep', 'key-b')).toBe('ok');
    expect(claim(o, 'ep', 'key-a')).toEqual([403, 'episode_not_owned']);
  });

  it('holds at most maxEpisodes, forgetting the least recently used', () => {
    const o = owners(2);
    claim(o, 'e1', 'key-a');
    claim(o, 'e2', 'key-a');
    claim(o, 'e1', 'key-a');
    claim(o, 'e3', 'key-a');
    expect(o.size).toBe(2);
    // e2 was the least recently used: forgotten, so another key may take it; e1 is still owned.
    expect([claim(o, 'e1', 'key-b'), claim(o, 'e2', 'key-b')]).toEqual([[403, 'episode_not_owned'], 'ok']);
  });

  it('refuses an episode id longer than events allow (400), so no entry is larger', () => {
    expect(() => owners().claim('e'.repeat(257), 'key-a', 'X-SRPO-Episode')).toThrow(expect.objectContaining({ status: 400, param: 'X-SRPO-Episode' }));
  });
});
