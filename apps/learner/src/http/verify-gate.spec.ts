import { HttpStatus } from '@nestjs/common';
import { VerifyBusyException, VerifyGate, VERIFY_CONCURRENCY } from './verify-gate';

/** A verification that finishes when the test says so. */
function pending<T>(): { promise: Promise<T>; resolve(value: T): void; reject(e: Error): void } {
  let resolve!: (value: T) => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('VerifyGate', () => {
  it('runs one verification per learner by default', () => {
    expect(VERIFY_CONCURRENCY).toBe(1);
  });

  it('refuses a second verification with 429 while one runs, naming the running update', async () => {
    const gate = new VerifyGate();
    const first = pending<string>();
    const running = gate.run('solver.v1', () => first.promise);
    expect(gate.inFlight).toBe(1);
    const refused = gate.run('solver.v2', () => Promise.resolve('never'));
    await expect(refused).rejects.toBeInstanceOf(VerifyBusyException);
    const e = (await refused.catch((x: unknown) => x)) as VerifyBusyException;
    expect(e.getStatus()).toBe(HttpStatus.TOO_MANY_REQUESTS);
    expect(e.getResponse()).toEqual({
      statusCode: 429,
      error: 'Too Many Requests',
      message: 'a verification is already running (solver.v1); this learner verifies one update at a time: retry when it has finished',
    });
    first.resolve('report');
    await expect(running).resolves.toBe('report');
    expect(gate.inFlight).toBe(0);
  });

  it('frees the slot when a verification fails, and admits the next one', async () => {
    const gate = new VerifyGate();
    const first = pending<string>();
    const running = gate.run('a', () => first.promise);
    first.reject(new Error('no such update'));
    await expect(running).rejects.toThrow('no such update');
    expect(gate.inFlight).toBe(0);
    await expect(gate.run('b', () => Promise.resolve('ok'))).resolves.toBe('ok');
  });

  it('takes the slot before the verification starts, so calls made together cannot both pass', async () => {
    const gate = new VerifyGate();
    const gates = [pending<number>(), pending<number>(), pending<number>()];
    const results = await Promise.allSettled(
      gates.map((g, i) => {
        const run = gate.run(`u${i}`, () => g.promise);
        g.resolve(i);
        return run;
      }),
    );
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
  });

  it('admits up to its limit', async () => {
    const gate = new VerifyGate(2);
    const a = pending<string>();
    const b = pending<string>();
    const runs = [gate.run('x', () => a.promise), gate.run('x', () => b.promise)];
    await expect(gate.run('y', () => Promise.resolve('z'))).rejects.toThrow(
      /^2 verifications are already running \(x, x\); this learner verifies 2 updates at a time/,
    );
    a.resolve('a');
    await runs[0];
    expect(gate.inFlight).toBe(1);
    await expect(gate.run('y', () => Promise.resolve('z'))).resolves.toBe('z');
    b.resolve('b');
    await expect(runs[1]).resolves.toBe('b');
  });
});
