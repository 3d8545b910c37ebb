import { createHash } from 'crypto';

/** Pure parsing the checks compare against (versions, ranges, setup.sh's stamp). */

/** Parses `20.11`, `v20.20.2`, `22` into [major, minor, patch]; undefined when not a version. */
export function parseVersion(text: string): [number, number, number] | undefined {
  const m = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?/.exec(text.trim());
  if (!m) return undefined;
  return [Number(m[1]), Number(m[2] ?? 0), Number(m[3] ?? 0)];
}

/** Orders two [major, minor, patch] triples (negative, zero, positive). */
export function compareVersions(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

/**
 * Whether `version` satisfies an npm `engines` range made of `||` alternatives
 * of space-separated comparators (`>=20.11 <21 || >=22`). The whole of semver
 * is not needed: package.json only uses these forms, and an unknown form is
 * reported rather than guessed.
 */
export function satisfiesRange(version: string, range: string): boolean {
  const v = parseVersion(version);
  if (!v) return false;
  return range.split('||').some((alt) => {
    const comparators = alt
      .trim()
      .split(/\s+/)
      .filter((s) => s);
    if (comparators.length === 0) return false;
    return comparators.every((c) => {
      const m = /^(>=|<=|>|<|=)?\s*(v?\d+(?:\.\d+){0,2})$/.exec(c);
      if (!m) throw new Error(`unsupported engines comparator '${c}'`);
      const bound = parseVersion(m[2]);
      if (!bound) return false;
      const d = compareVersions(v, bound);
      switch (m[1] ?? '=') {
        case '>=':
          return d >= 0;
        case '>':
          return d > 0;
        case '<=':
          return d <= 0;
        case '<':
          return d < 0;
        default:
          return d === 0;
      }
    });
  });
}

/** Java's major version from `java -version` output: `"17.0.15"` → 17, `"1.8.0_292"` → 8. */
export function javaMajor(versionOutput: string): number | undefined {
  const m = /version "(\d+)(?:\.(\d+))?[^"]*"/.exec(versionOutput);
  if (!m) return undefined;
  const major = Number(m[1]);
  return major === 1 && m[2] !== undefined ? Number(m[2]) : major;
}

/** setup.sh's stamp: `sha256sum package-lock.json package.json | sha256sum | cut -c1-16`. */
export function setupStampHash(lockText: string, packageText: string, patches: readonly { name: string; text: string }[] = []): string {
  const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
  // As `sha256sum package-lock.json package.json patches/*` lists them (scripts/setup.sh).
  const patchLines = [...patches]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((p) => `${sha(p.text)}  patches/${p.name}\n`)
    .join('');
  const listing = `${sha(lockText)}  package-lock.json\n${sha(packageText)}  package.json\n${patchLines}`;
  return sha(listing).slice(0, 16);
}
