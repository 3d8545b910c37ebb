import * as fs from 'fs';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { REFERENCE_CASES_PATH, referenceCases, referenceCasesText } from '../../libs/srpo/src/test/reference-cases';

/**
 * Writes examples/python-trainer/fixtures/srpo-reference-cases.json: the SRPO objective's
 * reference cases, computed by libs/srpo (the one reference) for the Python implementations'
 * tests (test_srpo_reference.py). Run after a change to libs/srpo's objective:
 *
 *   npm run build:bench && node dist-bench/examples/python-trainer/make-reference-cases.js
 *
 * libs/srpo/src/reference-cases.spec.ts fails until the checked-in file equals what this writes.
 */
async function main(): Promise<void> {
  const file = path.join(repoRoot(), REFERENCE_CASES_PATH);
  const cases = await referenceCases();
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, referenceCasesText(cases));
  process.stdout.write(`${JSON.stringify({ wrote: path.relative(repoRoot(), file), cases: cases.cases.length })}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
