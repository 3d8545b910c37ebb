import * as fs from 'fs';
import * as path from 'path';
import { fileURLToPath } from 'url';
import { ErrorCode, SrpoError } from '@srpo/core';

/** A checkpoint location from an announcement: a `file://` URI or a plain path. */
export function checkpointDirOf(uri: string): string {
  if (uri.startsWith('file:')) return fileURLToPath(uri);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(uri)) {
    throw new SrpoError(ErrorCode.CONFIG_INVALID, `checkpoint URI ${uri}: only file:// locations are supported`);
  }
  return path.resolve(uri);
}

/**
 * The directory a checkpoint URI names, provided it lies inside the checkpoint store `root`
 * once `..` and symbolic links are resolved (of the store and of the checkpoint, as far as they
 * exist); anything else is refused with a VALIDATION_FAILED naming `checkpointUri`. An event
 * can then never make a server read weights (or any file) from elsewhere on its disk.
 */
export function checkpointDirInStore(root: string, uri: string): string {
  const refuse = (why: string): SrpoError => new SrpoError(ErrorCode.VALIDATION_FAILED, `checkpoint ${uri} refused: ${why}`, { field: 'checkpointUri' });
  let dir: string;
  try {
    dir = checkpointDirOf(uri);
  } catch (e) {
    throw refuse(e instanceof Error ? e.message : String(e));
  }
  const store = realPath(root);
  const real = realPath(dir);
  const rel = path.relative(store, real);
  if (rel === '' || rel === '..' || rel.startsWith(`..${path.sep}`) || path.isAbsolute(rel))
    throw refuse(`it resolves to ${real}, outside the checkpoint store ${store} (SRPO_CHECKPOINT_DIR)`);
  return real;
}

/** `p` with its symbolic links resolved as far as it exists; the part that does not exist yet is kept as written (after `..` is resolved). */
function realPath(p: string): string {
  const absolute = path.resolve(p);
  const missing: string[] = [];
  let head = absolute;
  for (;;) {
    try {
      return path.join(fs.realpathSync.native(head), ...missing);
    } catch (e) {
      // Only a part that does not exist is kept as written; a link loop or a denied directory is not guessed at.
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR')
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, `cannot resolve ${p} (${code})`, { field: 'checkpointUri' });
    }
    const parent = path.dirname(head);
    if (parent === head) return absolute;
    missing.unshift(path.basename(head));
    head = parent;
  }
}
