#!/usr/bin/env node
'use strict';
// The `srpo` command. Runs the compiled CLI from dist/ (built by `npm run setup` / `npm run build`).
const fs = require('fs');
const path = require('path');

const entry = path.join(__dirname, '..', 'dist', 'apps', 'cli', 'src', 'main.js');
if (!fs.existsSync(entry)) {
  process.stderr.write(
    'srpo: the CLI is not built yet; run `npm run setup` first (it checks the prerequisites, installs, builds and ends with\n' +
      '`srpo doctor`, which prints the fix for anything missing), or `npm run build` when node_modules is already installed\n',
  );
  process.exit(1);
}
require(entry).main();
