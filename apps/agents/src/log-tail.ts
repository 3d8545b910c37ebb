import * as fs from 'fs';

/** The last `lines` lines of a log file, for error messages ('' when it cannot be read). */
export function tail(file: string, lines: number): string {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}
