import { ValidationError } from '@srpo/core';
import { VersionPacer, waitForVersion } from './version-pacer';

describe('VersionPacer', () => {
  it('lets problem i start once version ⌊i / tasksPerUpdate⌋ − maxAhead serves', () => {
    // 16 sets per update, 8 solver sets per problem: 2 problems per update.
    const p = new VersionPacer(2, 1);
    // Problems 0–3 feed updates 1 and 2: version 0 may sample them.
    expect([0, 1, 2, 3].map((i) => p.required(i))).toEqual([-1, -1, 0, 0]);
    // Problems 4 and 5 feed update 3: they wait for version 1.
    expect(p.required(4)).toBe(1);
    expect(p.required(5)).toBe(1);
    expect(p.required(9)).toBe(3);
    expect(new VersionPacer(2, 0).required(2)).toBe(1);
    // With the verifier a problem gives 16 sets: one problem per update.
    expect(new VersionPacer(1, 1).required(3)).toBe(2);
  });

  it('a timed-out wait re-bases the count on the version served then', () => {
    const p = new VersionPacer(2, 1);
    expect(p.required(10)).toBe(4);
    // The learner skipped a group: version 3 serves where 4 was due.
    p.rebase(10, 3);
    expect(p.required(10)).toBe(3);
    expect(p.required(12)).toBe(4);
    // A version ahead of the count changes nothing.
    p.rebase(12, 9);
    expect(p.required(12)).toBe(4);
  });

  it('refuses settings it cannot pace by, naming them', () => {
    expect(() => new VersionPacer(0, 1)).toThrow(ValidationError);
    expect(() => new VersionPacer(2, -1)).toThrow(/maxAhead/);
    expect(() => new VersionPacer(Number.NaN, 1)).toThrow(/tasksPerUpdate/);
  });
});

describe('waitForVersion', () => {
  const clock = () => {
    let t = 0;
    return { now: () => t, sleep: async (ms: number) => void (t += ms) };
  };

  it('returns as soon as the served version reaches what the problem needs', async () => {
    const c = clock();
    const versions = [0, 0, 1, 2];
    let polls = 0;
    const r = await waitForVersion(new VersionPacer(2, 1), 5, async () => versions[Math.min(polls++, versions.length - 1)], {
      pollMs: 500,
      timeoutMs: 60_000,
      stopped: () => false,
      ...c,
    });
    expect(r).toEqual({ version: 1, timedOut: false });
    expect(c.now()).toBe(1000);
  });

  it('gives up after the timeout and re-bases, so the next problem does not wait for the missing version', async () => {
    const c = clock();
    const p = new VersionPacer(2, 1);
    const r = await waitForVersion(p, 6, async () => 1, { pollMs: 500, timeoutMs: 3000, stopped: () => false, ...c });
    expect(r).toEqual({ version: 1, timedOut: true });
    expect(c.now()).toBe(3000);
    expect(p.required(6)).toBe(1);
    expect(p.required(7)).toBe(1);
  });

  it('stops waiting when the run is stopped', async () => {
    const c = clock();
    let stop = false;
    const r = await waitForVersion(
      new VersionPacer(2, 0),
      10,
      async () => {
        stop = c.now() >= 1000;
        return 0;
      },
      { pollMs: 500, timeoutMs: 60_000, stopped: () => stop, ...c },
    );
    expect(r.timedOut).toBe(false);
    expect(c.now()).toBe(1000);
  });
});
