import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ValidationError } from '@srpo/core';
import { appendDecision, DECISIONS_FILE, readDecisions, readPin, writePin } from './publish-records';
import { parseVersionedName, rollbackTo, unpinPolicy } from './rollback';

describe('rollback names, pins and the decisions record', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-rollback-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('reads <policy>@v<N>, failing naming the flag', () => {
    expect(parseVersionedName('actor@v12')).toEqual({ policyId: 'actor', version: 12 });
    expect(parseVersionedName('team/actor@v0')).toEqual({ policyId: 'team/actor', version: 0 });
    for (const bad of ['actor', 'actor@12', 'actor@v', '@v3', 'actor@v1.5']) {
      expect(() => parseVersionedName(bad, '--to')).toThrow(ValidationError);
      expect(() => parseVersionedName(bad, '--to')).toThrow(/--to/);
    }
  });

  it('unpin removes the pin and records it; with no pin it records nothing', () => {
    writePin(dir, { policyId: 'actor', version: 3, model: 'actor@v3', path: '/x', at: 't' });
    expect(readPin(dir, 'actor')?.version).toBe(3);
    expect(unpinPolicy(dir, 'actor')?.version).toBe(3);
    expect(readPin(dir, 'actor')).toBeUndefined();
    expect(unpinPolicy(dir, 'actor')).toBeUndefined();
    expect(readDecisions(dir).map((d) => [d.decision, d.version])).toEqual([['unpin', 3]]);
  });

  it('a torn last line of decisions.jsonl (a crash mid-write) is skipped', () => {
    appendDecision(dir, { at: 't', policyId: 'actor', version: 1, model: 'actor@v1', decision: 'accepted', reason: 'r' });
    fs.appendFileSync(path.join(dir, DECISIONS_FILE), '{"at":"t","policyId":"act');
    expect(readDecisions(dir).map((d) => d.version)).toEqual([1]);
  });

  it('a version with no adapter and no announcement is not found, and nothing is pinned', async () => {
    await expect(
      rollbackTo(
        { servers: ['http://127.0.0.1:9'], gateways: [], exportDir: dir, checkpointDir: dir, findVersion: () => Promise.resolve(undefined) },
        'actor',
        7,
      ),
    ).rejects.toThrow(/actor@v7: no adapter/);
    expect(readPin(dir, 'actor')).toBeUndefined();
  });

  it('a server that cannot be reached fails the rollback and puts the previous pin back', async () => {
    const adapter = path.join(dir, 'actor', 'v2');
    fs.mkdirSync(adapter, { recursive: true });
    fs.writeFileSync(path.join(adapter, 'adapter_config.json'), '{}');
    writePin(dir, { policyId: 'actor', version: 1, model: 'actor@v1', path: '/x', at: 't' });
    // Port 9 (discard) has no HTTP server on a test machine: unreachable.
    await expect(
      rollbackTo({ servers: ['http://127.0.0.1:9'], gateways: [], exportDir: dir, checkpointDir: dir, requestTimeoutMs: 2000 }, 'actor', 2),
    ).rejects.toThrow(/rollback to actor@v2 not done/);
    expect(readPin(dir, 'actor')?.version).toBe(1);
    expect(readDecisions(dir)).toEqual([]);
  });
});
