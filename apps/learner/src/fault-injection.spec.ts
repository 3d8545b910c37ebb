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

  it('slowPiece blocks the event loop for SRPO_SLOW_MICRO_BATCH_MS (0 when unset)', async () => {
    let fired = false;
    const timer = setTimeout(() => (fired = true), 0);
    const started = Date.now();
    new FaultInjector(undefined, () => undefined, 50).slowPiece();
    expect(Date.now() - started).toBeGreaterThanOrEqual(50);
    // The zero-delay timer was due all along, yet could not run: the loop was held.
    expect(fired).toBe(false);
    await new Promise((r) => setTimeout(r, 0));
    expect(fired).toBe(true);
    clearTimeout(timer);
    expect(new FaultInjector(undefined).slowMicroBatchMs).toBe(0);
  });
});
