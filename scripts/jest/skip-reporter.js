// A jest reporter beside the default one: prints at the end of every run how many tests were
// skipped (describe.skip / it.skip / it.todo, and the native-kernel specs' describeNative where the
// addon is missing) and names the first of them, so that a green run cannot hide tests that did
// not run. With SRPO_FAIL_ON_SKIP=1 (CI) a skipped test fails the run: getLastError() returns an
// Error, which makes jest exit non-zero. Tests left out by -t/--testNamePattern are counted but
// do not fail it (they were filtered on purpose).
'use strict';

const LISTED = 20;
const SKIPPED = new Set(['pending', 'skipped', 'todo', 'disabled']);

class SkipReporter {
  constructor(globalConfig) {
    this.filtered = Boolean(globalConfig.testNamePattern);
    this.error = undefined;
  }

  onRunComplete(_contexts, results) {
    const skipped = [];
    for (const file of results.testResults) {
      for (const t of file.testResults) if (SKIPPED.has(t.status)) skipped.push(t.fullName || [...t.ancestorTitles, t.title].join(' '));
    }
    const lines = [`skipped: ${skipped.length} test${skipped.length === 1 ? '' : 's'}`];
    for (const name of skipped.slice(0, LISTED)) lines.push(`  - ${name}`);
    if (skipped.length > LISTED) lines.push(`  ... and ${skipped.length - LISTED} more`);
    const failing = skipped.length > 0 && process.env.SRPO_FAIL_ON_SKIP === '1' && !this.filtered;
    if (failing) lines.push(`SRPO_FAIL_ON_SKIP=1: ${skipped.length === 1 ? 'a skipped test fails' : `${skipped.length} skipped tests fail`} the run`);
    process.stderr.write(`\n${lines.join('\n')}\n`);
    this.error = failing ? new Error(`${skipped.length} test(s) skipped with SRPO_FAIL_ON_SKIP=1`) : undefined;
  }

  getLastError() {
    return this.error;
  }
}

module.exports = SkipReporter;
