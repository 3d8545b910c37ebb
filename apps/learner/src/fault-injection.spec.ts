import { Logger } from '@srpo/core';
import { FaultInjector } from './fault-injection';
import { CRASH_POINTS } from './learner-config';

Logger.configure({ level: 'error' });

describe('FaultInjector (SRPO_CRASH_AT)', () => {
  it.each(CRASH_POINTS.map((p) => [p]))('kills only at %s', (point) => {
    const kills: string[] = [];
    const faults = new FaultInjector(point, () => kills.push(point));
    for (const p of CRASH_POINTS) faults.reached(p);
    expect(kills).toEqual([point]);
  });

  it('does nothing when unset', () => {
    let killed = 0;
    const faults = new FaultInjector(undefined, () => killed++);
    for (const p of CRASH_POINTS) faults.reached(p);
    expect(killed).toBe(0);
  });
});
