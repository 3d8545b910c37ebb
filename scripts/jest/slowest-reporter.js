// A jest reporter beside the default one: prints at the end of a run of several suites the
// slowest of them with their wall time, so that CI's log says where the suite's time goes
// (CI aims at about 25 minutes for the whole run).
'use strict';

const path = require('path');

const LISTED = 15;

class SlowestReporter {
  constructor(globalConfig) {
    this.rootDir = globalConfig.rootDir;
  }

  onRunComplete(_contexts, results) {
    const suites = results.testResults
      .map((file) => ({ file: path.relative(this.rootDir, file.testFilePath), seconds: (file.perfStats.end - file.perfStats.start) / 1000 }))
      .filter((s) => Number.isFinite(s.seconds));
    if (suites.length < 2) return;
    const total = suites.reduce((a, s) => a + s.seconds, 0);
    suites.sort((a, b) => b.seconds - a.seconds);
    const lines = [`slowest suites (of ${suites.length}, ${total.toFixed(0)} s in all):`];
    for (const s of suites.slice(0, LISTED)) lines.push(`  ${s.seconds.toFixed(1).padStart(7)} s  ${s.file}`);
    process.stderr.write(`\n${lines.join('\n')}\n`);
  }
}

module.exports = SlowestReporter;
