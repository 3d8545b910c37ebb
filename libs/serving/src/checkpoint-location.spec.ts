import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import { ErrorCode } from '@srpo/core';
import { checkpointDirInStore } from './checkpoint-location';

describe('checkpoints only from the checkpoint store', () => {
  const tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-ckloc-')));
  const root = path.join(tmp, 'checkpoints');
  const inside = path.join(root, 'actor', 'v1');
  const outside = path.join(tmp, 'elsewhere', 'actor', 'v1');
  beforeAll(() => {
    fs.mkdirSync(inside, { recursive: true });
    fs.mkdirSync(outside, { recursive: true });
    fs.mkdirSync(path.join(tmp, 'checkpoints-evil', 'v1'), { recursive: true });
    // A link inside the store to a directory outside it, and a link to the store itself.
    fs.symlinkSync(outside, path.join(root, 'actor', 'v2'));
    fs.symlinkSync(root, path.join(tmp, 'store-link'));
  });
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

  it('accepts a directory of the store, as a path or a file:// URI, also one not written yet, and through a link to the store', () => {
    expect(checkpointDirInStore(root, inside)).toBe(inside);
    expect(checkpointDirInStore(root, pathToFileURL(inside).href)).toBe(inside);
    expect(checkpointDirInStore(root, path.join(root, 'actor', 'v9'))).toBe(path.join(root, 'actor', 'v9'));
    expect(checkpointDirInStore(path.join(tmp, 'store-link'), path.join(tmp, 'store-link', 'actor', 'v1'))).toBe(inside);
  });

  it.each([
    ['/etc', '/etc'],
    ['a path climbing out with ..', path.join(root, '..', 'elsewhere', 'actor', 'v1')],
    ['a file:// URI climbing out with ..', `file://${root}/../elsewhere/actor/v1`],
    ['a link inside the store to a directory outside it', path.join(root, 'actor', 'v2')],
    ['a sibling whose name starts like the store', path.join(tmp, 'checkpoints-evil', 'v1')],
    ['the store itself', root],
    ['a relative path (resolved against the working directory)', '../etc'],
    ['another scheme', 's3://bucket/actor/v1'],
  ])('refuses %s, naming checkpointUri and the reason', (_what, uri) => {
    let error: unknown;
    try {
      checkpointDirInStore(root, uri);
    } catch (e) {
      error = e;
    }
    expect(error).toMatchObject({ code: ErrorCode.VALIDATION_FAILED, field: 'checkpointUri', message: expect.stringContaining(`checkpoint ${uri} refused`) });
  });
});
