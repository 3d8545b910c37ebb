import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, SrpoError } from './errors';

/** The repository root (the directory whose package.json is this project's), from src or dist. */
export function repoRoot(from: string = __dirname): string {
  let dir = from;
  for (let i = 0; i < 10; i++) {
    const pkg = path.join(dir, 'package.json');
    if (fs.existsSync(pkg) && fs.existsSync(path.join(dir, 'schemas'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new SrpoError(ErrorCode.ENVIRONMENT, `repository root not found above ${from}`);
}
