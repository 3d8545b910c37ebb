import * as fs from 'fs';
import * as path from 'path';

/**
 * Inputs that broke a decoder once (found by hand or by a fuzzer), replayed before every fuzz
 * run: `regressions/<target>.json`, each `{name, description, base64, reason}` with the reason
 * code or error the input must now get. When a fuzzer finds a failure, its shrunk input goes here
 * with the fix.
 */
export interface FuzzRegression {
  name: string;
  description: string;
  base64: string;
  reason: string;
}

function load(target: string): FuzzRegression[] {
  return JSON.parse(fs.readFileSync(path.join(__dirname, 'regressions', `${target}.json`), 'utf8')) as FuzzRegression[];
}

export const EVENT_CODEC_REGRESSIONS = load('event-codec');
