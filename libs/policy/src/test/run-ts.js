#!/usr/bin/env node
/*
 * Runs a TypeScript file of this repository in a plain Node process:
 *   node libs/policy/src/test/run-ts.js path/to/file.ts [args...]
 *
 * For specs that need a process of their own (a second tfjs backend: one
 * process holds one backend cleanly, and Dawn keeps its process alive until
 * released). Transpiles with @swc/core, which jest already uses, and maps
 * `@srpo/<lib>` by tsconfig.json's paths, as jest.config.js does; no type checking (tsc does that).
 */
'use strict';
const path = require('node:path');
const Module = require('node:module');
const fs = require('node:fs');
const swc = require('@swc/core');

const root = path.resolve(__dirname, '../../../..');
// tsconfig.json's `paths` (`@srpo/<lib>` and entries such as `@srpo/kernels/tuning`), read here so
// that a new library or entry needs no edit of this file.
const paths = JSON.parse(fs.readFileSync(path.join(root, 'tsconfig.json'), 'utf8')).compilerOptions.paths;
const alias = new Map(Object.entries(paths).map(([name, [target]]) => [name, path.join(root, target)]));

const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, parent, ...rest) {
  return resolve.call(this, alias.get(request) ?? request, parent, ...rest);
};

// Node's own extension hook: deprecated in name only, and it needs no loader package.
Module._extensions['.ts'] = function (module, filename) {
  const { code } = swc.transformSync(fs.readFileSync(filename, 'utf8'), {
    filename,
    jsc: { parser: { syntax: 'typescript', decorators: true }, transform: { legacyDecorator: true, decoratorMetadata: true }, target: 'es2022' },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
  });
  module._compile(code, filename);
};

const [file, ...args] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: run-ts.js FILE.ts [args...]\n');
  process.exit(2);
}
process.argv = [process.argv[0], path.resolve(file), ...args];
require(path.resolve(file));
