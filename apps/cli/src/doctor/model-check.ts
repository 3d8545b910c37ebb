import * as path from 'path';
import { SMOLLM2_MAKE_COMMAND, smollm2DirProblem, smollm2ModelDir } from '@srpo/hf';
import { bad, ok } from './check-support';
import type { DoctorHost, DoctorResult } from './doctor-host';

/**
 * The real model, SmolLM2-135M-Instruct as a Hugging Face directory, where `scripts/setup.sh`
 * makes it (SRPO_SMOLLM2_DIR, else $SRPO_CACHE_DIR/models/smollm2-135m-instruct, else
 * ~/.cache/srpo/models/...; the rule of `smollm2ModelDir`). Optional: the demo's symbol tasks run
 * without it; the real-model tests and bench need it (CI requires it with SRPO_REQUIRE_SMOLLM2=1).
 */
export function checkSmollm2(host: DoctorHost): DoctorResult[] {
  const dir = smollm2ModelDir(host.env);
  const problem = smollm2DirProblem(dir, host);
  if (problem !== undefined) {
    return [
      bad('smollm2', 'optional', `${problem} (optional: the real-model tests and bench, SRPO_SMOLLM2_DIR to point elsewhere)`, SMOLLM2_MAKE_COMMAND, false),
    ];
  }
  // make-smollm2.py records what it was made from beside the directory.
  let source = '';
  try {
    const s = JSON.parse(host.readText(path.join(path.dirname(dir), `${path.basename(dir)}.source.json`)) ?? '{}') as {
      package?: string;
      transformers?: string;
    };
    if (s.package) source = ` (from ${s.package}${s.transformers ? `, transformers ${s.transformers}` : ''})`;
  } catch {
    // Only the detail line loses the source; the directory itself is complete.
  }
  return [ok('smollm2', 'optional', `${dir}${source}`)];
}
