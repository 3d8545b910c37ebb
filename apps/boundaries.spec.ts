import * as fs from 'fs';
import * as path from 'path';

/*
 * The dependency rules that dependency-cruiser cannot express, checked on the sources (a lint
 * rule in test form):
 * - processors, and the files they import by relative path, see a record, a store and event
 *   time: no kafkajs, no wall clock;
 * - libs/srpo is pure math on tfjs.
 * Which app, lib, bench or test folder may import which (apps are leaves, libs import no app,
 * the libs' tiers, no product import of test code) is .dependency-cruiser.cjs's, run by
 * `npm run lint:deps` in `npm run typecheck`.
 */

const root = path.resolve(__dirname, '..');

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sources(full));
    else if (entry.name.endsWith('.ts')) out.push(full);
  }
  return out;
}

/** Module specifiers of static imports, re-exports, dynamic imports and requires. */
function specifiers(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const found: string[] = [];
  const re = /(?:\bfrom\s+|\bimport\s*\(\s*|\brequire\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm;
  for (let m = re.exec(text); m; m = re.exec(text)) found.push(m[1]);
  return found;
}

/** The file a relative specifier names: `x.ts` or `x/index.ts`. */
function resolveRelative(from: string, spec: string): string | undefined {
  const base = path.resolve(path.dirname(from), spec);
  return [`${base}.ts`, path.join(base, 'index.ts')].find((f) => fs.existsSync(f));
}

/** `files` and every file they import by relative path, transitively: what a processor runs is its own code too. */
function withLocalImports(files: string[]): string[] {
  const seen = new Set(files);
  const queue = [...files];
  for (let file = queue.pop(); file !== undefined; file = queue.pop()) {
    for (const spec of specifiers(file)) {
      const target = spec.startsWith('.') ? resolveRelative(file, spec) : undefined;
      if (target !== undefined && !seen.has(target)) {
        seen.add(target);
        queue.push(target);
      }
    }
  }
  return [...seen];
}

const libFiles = sources(path.join(root, 'libs'));

describe('dependency boundaries', () => {
  it('finds the libs it checks', () => {
    expect(libFiles.length).toBeGreaterThan(100);
  });

  it('processors use neither kafkajs nor the wall clock', () => {
    const processors = [...libFiles, ...sources(path.join(root, 'apps'))].filter((f) => f.endsWith('.processor.ts'));
    expect(processors.length).toBeGreaterThanOrEqual(2);
    // Helpers split out of a processor (its state, checks, emitted events) are held to the same rule.
    const checked = withLocalImports(processors);
    expect(checked.length).toBeGreaterThan(processors.length);
    const offending: string[] = [];
    for (const file of checked) {
      const text = fs.readFileSync(file, 'utf8');
      if (specifiers(file).some((s) => s === 'kafkajs' || s.startsWith('kafkajs/'))) offending.push(`${path.relative(root, file)}: imports kafkajs`);
      if (/\bDate\.now\s*\(|\bnew Date\s*\(\s*\)|performance\.now\s*\(/.test(text)) offending.push(`${path.relative(root, file)}: reads the wall clock`);
    }
    expect(offending).toEqual([]);
  });

  it('libs/srpo imports only tfjs, @srpo/core and itself', () => {
    const offending: string[] = [];
    for (const file of sources(path.join(root, 'libs', 'srpo')).filter((f) => !f.endsWith('.spec.ts'))) {
      for (const spec of specifiers(file)) {
        if (spec.startsWith('.') || spec === '@srpo/core' || spec.startsWith('@tensorflow/tfjs')) continue;
        offending.push(`${path.relative(root, file)} -> ${spec}`);
      }
    }
    expect(offending).toEqual([]);
  });
});
