import { RequestScope, versionOfFingerprint } from './text-agent-client';

describe('versionOfFingerprint', () => {
  it("reads srpo serve's srpo-<policy>-v<N> for the policy asked", () => {
    expect(versionOfFingerprint('srpo-smollm2-demo-v12', 'smollm2-demo')).toBe(12);
    expect(versionOfFingerprint('srpo-actor-v0', 'actor')).toBe(0);
  });

  it('anything else is unknown: another policy, another server, no fingerprint', () => {
    expect(versionOfFingerprint('srpo-judge-v3', 'actor')).toBeUndefined();
    expect(versionOfFingerprint('srpo-actor-v3x', 'actor')).toBeUndefined();
    expect(versionOfFingerprint('fp_44709d6fcb', 'actor')).toBeUndefined();
    expect(versionOfFingerprint(null, 'actor')).toBeUndefined();
    expect(versionOfFingerprint(undefined, 'actor')).toBeUndefined();
  });
});

describe('RequestScope', () => {
  it('aborts every request in flight at once, forgets settled ones, and aborts later ones at once', async () => {
    const scope = new RequestScope();
    const seen: AbortSignal[] = [];
    const hang = (signal: AbortSignal) =>
      new Promise<string>((_, reject) => {
        seen.push(signal);
        // As fetch does: an already aborted signal fails the request at once.
        if (signal.aborted) reject(new Error('aborted'));
        signal.addEventListener('abort', () => reject(new Error('aborted')));
      });
    await expect(scope.run(() => Promise.resolve('done'))).resolves.toBe('done');
    expect(scope.size).toBe(0);
    const a = scope.run(hang);
    const b = scope.run(hang);
    expect(scope.size).toBe(2);
    scope.abort();
    await expect(a).rejects.toThrow('aborted');
    await expect(b).rejects.toThrow('aborted');
    expect(scope.size).toBe(0);
    expect(seen[0]).not.toBe(seen[1]);
    await expect(scope.run(hang)).rejects.toThrow('aborted');
  });
});
