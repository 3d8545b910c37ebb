// describeSmollm2 declares jest suites, and benches (compiled with types: node only) import this file too.
/// <reference types="jest" />
import { SMOLLM2_MAKE_COMMAND, smollm2DirProblem, smollm2ModelDir } from '@srpo/hf';

/** The real model's directory, or why a test or bench cannot have it. */
export type Smollm2Resolution = { dir: string; skip?: undefined } | { dir?: undefined; skip: string };

/**
 * SmolLM2-135M-Instruct as a Hugging Face directory, for the tests and benches on the real model:
 * the path `scripts/setup.sh` makes it at (SRPO_SMOLLM2_DIR, else $SRPO_CACHE_DIR/models/
 * smollm2-135m-instruct, else ~/.cache/srpo/models/smollm2-135m-instruct; see `smollm2ModelDir`
 * of @srpo/hf), or a skip reason that names the directory, what is wrong and the command that
 * makes it.
 */
export function smollm2Dir(env: Readonly<Record<string, string | undefined>> = process.env): Smollm2Resolution {
  const dir = smollm2ModelDir(env);
  const problem = smollm2DirProblem(dir);
  if (problem === undefined) return { dir };
  return { skip: `SmolLM2-135M-Instruct is not there: ${problem}; ${SMOLLM2_MAKE_COMMAND} (or npm run setup) makes it` };
}

/**
 * `describe` for tests on the real model, chosen when the spec file loads (as `describeNative`):
 * - the directory is complete: `describe(title, () => fn(dir))`;
 * - otherwise `describe.skip`, the reason in the title, so that the run reports the tests as
 *   skipped instead of passing them (scripts/jest/skip-reporter.js lists them; SRPO_FAIL_ON_SKIP=1
 *   fails the run);
 * - otherwise with SRPO_REQUIRE_SMOLLM2=1 (CI, whose set-up makes the directory): `describe`, with
 *   a first test that fails with the reason (the others then fail on their own).
 * `fn` runs at collection time even when skipped: it must only declare tests and hooks, and do its
 * reading of `dir` inside them.
 */
export function describeSmollm2(title: string, fn: (dir: string) => void, env: Readonly<Record<string, string | undefined>> = process.env): void {
  const found = smollm2Dir(env);
  if (found.dir !== undefined) {
    describe(title, () => fn(found.dir));
  } else if (env.SRPO_REQUIRE_SMOLLM2 === '1') {
    const dir = smollm2ModelDir(env);
    describe(title, () => {
      it('has the SmolLM2-135M-Instruct directory (SRPO_REQUIRE_SMOLLM2=1)', () => {
        throw new Error(`SRPO_REQUIRE_SMOLLM2=1 and ${found.skip}`);
      });
      fn(dir);
    });
  } else {
    describe.skip(`${title} [skipped: ${found.skip}]`, () => fn(smollm2ModelDir(env)));
  }
}
