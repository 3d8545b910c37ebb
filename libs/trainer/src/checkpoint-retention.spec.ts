import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { checkpointsToPrune, removeCheckpointDirs } from './checkpoint-retention';

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('checkpointsToPrune', () => {
  it('keeps version 0, the newest keepLast committed versions and the multiples of keepEvery', () => {
    // Committed v10, keep last 2 (v9, v10), every 4 (v4, v8), and v0.
    expect(checkpointsToPrune(range(0, 10), 10, { keepLast: 2, keepEvery: 4 })).toEqual({
      keep: [0, 4, 8, 9, 10],
      prune: [1, 2, 3, 5, 6, 7],
    });
  });

  it('with keepLast 1 keeps only the committed version besides anchors and version 0', () => {
    expect(checkpointsToPrune(range(0, 7), 7, { keepLast: 1, keepEvery: 3 })).toEqual({ keep: [0, 3, 6, 7], prune: [1, 2, 4, 5] });
  });

  it('never prunes versions above the committed one (a checkpoint written before a crash, not yet recorded)', () => {
    // Committed v5 with keep last 2 → v4, v5; v6 and v7 are uncommitted leftovers and stay.
    expect(checkpointsToPrune([0, 1, 2, 3, 4, 5, 6, 7], 5, { keepLast: 2, keepEvery: 0 })).toEqual({ keep: [0, 4, 5, 6, 7], prune: [1, 2, 3] });
  });

  it('keepEvery 0 keeps no anchors but version 0', () => {
    expect(checkpointsToPrune(range(0, 6), 6, { keepLast: 3, keepEvery: 0 })).toEqual({ keep: [0, 4, 5, 6], prune: [1, 2, 3] });
  });

  it('keepLast 0 keeps everything (retention off)', () => {
    expect(checkpointsToPrune(range(0, 250), 250, { keepLast: 0, keepEvery: 100 })).toEqual({ keep: range(0, 250), prune: [] });
  });

  it('prunes nothing while the run is younger than the window', () => {
    expect(checkpointsToPrune([0, 1, 2, 3], 3, { keepLast: 20, keepEvery: 100 })).toEqual({ keep: [0, 1, 2, 3], prune: [] });
  });

  it('works on what is on disk: gaps from earlier pruning, unsorted and repeated listings', () => {
    // Earlier prunes left v0, v100, v200 and v230..v250; now committed v252 with keep last 20 (v233..v252), every 100.
    const onDisk = [250, 0, 100, 200, ...range(230, 249), 251, 252, 250];
    expect(checkpointsToPrune(onDisk, 252, { keepLast: 20, keepEvery: 100 })).toEqual({
      keep: [0, 100, 200, ...range(233, 252)],
      prune: [230, 231, 232],
    });
  });

  it('refuses counts and versions that are not non-negative integers, naming the field', () => {
    expect(() => checkpointsToPrune([0], 0, { keepLast: -1, keepEvery: 4 })).toThrow(ValidationError);
    expect(() => checkpointsToPrune([0], 0, { keepLast: -1, keepEvery: 4 })).toThrow(/retention\.keepLast/);
    expect(() => checkpointsToPrune([0], 0, { keepLast: 2, keepEvery: 1.5 })).toThrow(/retention\.keepEvery/);
    expect(() => checkpointsToPrune([0, -3], 2, { keepLast: 2, keepEvery: 4 })).toThrow(/onDisk\[1\]/);
    expect(() => checkpointsToPrune([0], Number.NaN, { keepLast: 2, keepEvery: 4 })).toThrow(/committed/);
  });
});

describe('removeCheckpointDirs', () => {
  let policyDir: string;

  beforeEach(() => {
    policyDir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-prune-')), 'solver');
    for (const v of [0, 1, 2, 3]) {
      fs.mkdirSync(path.join(policyDir, `v${v}`), { recursive: true });
      fs.writeFileSync(path.join(policyDir, `v${v}`, 'model.json'), '{}');
      fs.writeFileSync(path.join(policyDir, `v${v}`, 'weights.bin'), Buffer.alloc(8));
    }
  });

  afterEach(() => fs.rmSync(path.dirname(policyDir), { recursive: true, force: true }));

  it('removes the given versions and nothing else', async () => {
    const result = await removeCheckpointDirs(policyDir, [1, 2]);
    expect(result).toEqual({ removed: [1, 2], missing: [], sweptLeftovers: 0 });
    expect(fs.readdirSync(policyDir).sort()).toEqual(['v0', 'v3']);
  });

  it('is idempotent: versions already gone are reported missing, not an error', async () => {
    await removeCheckpointDirs(policyDir, [1]);
    const again = await removeCheckpointDirs(policyDir, [1, 2]);
    expect(again).toEqual({ removed: [2], missing: [1], sweptLeftovers: 0 });
    expect(fs.readdirSync(policyDir).sort()).toEqual(['v0', 'v3']);
  });

  it('sweeps the hidden leftover of a prune interrupted between rename and removal', async () => {
    fs.renameSync(path.join(policyDir, 'v2'), path.join(policyDir, '.v2.pruned-123-456'));
    const result = await removeCheckpointDirs(policyDir, []);
    expect(result).toEqual({ removed: [], missing: [], sweptLeftovers: 1 });
    expect(fs.readdirSync(policyDir).sort()).toEqual(['v0', 'v1', 'v3']);
  });

  it('tolerates a policy directory that does not exist', async () => {
    await expect(removeCheckpointDirs(path.join(policyDir, 'nope'), [4])).resolves.toEqual({ removed: [], missing: [4], sweptLeftovers: 0 });
  });

  it('fails with UNAVAILABLE naming the path when the policy directory cannot be listed', async () => {
    const notADir = path.join(policyDir, 'v0', 'weights.bin');
    const err = await removeCheckpointDirs(notADir, [1]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SrpoError);
    expect((err as SrpoError).code).toBe(ErrorCode.UNAVAILABLE);
    expect((err as SrpoError).message).toContain(`cannot list ${notADir}`);
  });
});
