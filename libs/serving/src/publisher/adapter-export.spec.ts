import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import { ErrorCode, SrpoError } from '@srpo/core';
import type { PolicyVersion } from '@srpo/events';
import { exportLoraVersion, isLoraCheckpoint } from './adapter-export';

/** An announcement of actor v1 whose checkpoint is `dir`. */
function announced(dir: string): PolicyVersion {
  return {
    policyId: 'actor',
    version: 1,
    checkpointUri: pathToFileURL(dir).href,
    weightsHash: 'h',
    updateId: 'u1',
    eventTimeMs: 0,
  };
}

async function refusal(f: () => unknown): Promise<SrpoError> {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(SrpoError);
    return e as SrpoError;
  }
  throw new Error('no refusal');
}

/** The publisher reads only checkpoints inside the store, whatever path an event names (serve does the same). */
describe('adapter export: checkpoints only from the checkpoint store', () => {
  let tmp: string;
  let store: string;
  let outside: string;
  beforeEach(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-export-'));
    store = path.join(tmp, 'checkpoints');
    outside = path.join(tmp, 'elsewhere', 'actor', 'v1');
    fs.mkdirSync(path.join(store, 'actor'), { recursive: true });
    fs.mkdirSync(outside, { recursive: true });
    // A LoRA model.json, readable: only the location may refuse it.
    fs.writeFileSync(path.join(outside, 'model.json'), JSON.stringify({ userDefinedMetadata: { manifest: { lora: { rank: 2 } } } }));
  });
  afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

  const cases: [string, () => string][] = [
    ['a path outside the store', () => outside],
    ['a path that climbs out with ..', () => path.join(store, 'actor', '..', '..', 'elsewhere', 'actor', 'v1')],
    [
      'a link inside the store to a directory outside it',
      () => {
        const link = path.join(store, 'actor', 'v1');
        fs.symlinkSync(outside, link);
        return link;
      },
    ],
  ];

  it.each(cases)('%s: refused naming checkpointUri, before anything is read or written', async (_, where) => {
    const v = announced(where());
    const probe = await refusal(() => isLoraCheckpoint(v, store));
    expect([probe.code, probe.field]).toEqual([ErrorCode.VALIDATION_FAILED, 'checkpointUri']);
    expect(probe.message).toMatch(/outside the checkpoint store/);
    const exported = await refusal(() => exportLoraVersion(v, path.join(tmp, 'published'), store));
    expect([exported.code, exported.field]).toEqual([ErrorCode.VALIDATION_FAILED, 'checkpointUri']);
    expect(fs.existsSync(path.join(tmp, 'published'))).toBe(false);
  });

  it('the same model.json inside the store is read', () => {
    const inside = path.join(store, 'actor', 'v1');
    fs.cpSync(outside, inside, { recursive: true });
    expect(isLoraCheckpoint(announced(inside), store)).toBe(true);
  });
});
