import fc from 'fast-check';

/**
 * The fuzzers' shared parts: byte and JSON mutations of valid inputs (fast-check arbitraries), and
 * the property every target must hold on every case: it returns a value or throws one of its typed
 * errors, within a time bound, never anything else. docs/bad-input.md ("Fuzzing") lists the targets,
 * case counts and bounds.
 */

/** Bytes that make length prefixes, varints and UTF-8 interesting. */
const EDGE_BYTES = [0x00, 0x01, 0x02, 0x7f, 0x80, 0x81, 0xbf, 0xc0, 0xfe, 0xff];

type ByteMutation = (b: Uint8Array) => Uint8Array;

const at = (b: Uint8Array, i: number) => (b.length === 0 ? 0 : i % b.length);

/** One mutation of a byte string: a bit flip, an edge byte, a cut, an insertion, a deletion, a repeat. */
const byteMutation: fc.Arbitrary<ByteMutation> = fc.oneof(
  fc.tuple(fc.nat(), fc.integer({ min: 0, max: 7 })).map(([i, bit]): ByteMutation => (b) => {
    const out = Uint8Array.from(b);
    if (out.length > 0) out[at(b, i)] ^= 1 << bit;
    return out;
  }),
  fc.tuple(fc.nat(), fc.constantFrom(...EDGE_BYTES)).map(([i, v]): ByteMutation => (b) => {
    const out = Uint8Array.from(b);
    if (out.length > 0) out[at(b, i)] = v;
    return out;
  }),
  fc.nat().map(
    (i): ByteMutation =>
      (b) =>
        b.slice(0, at(b, i)),
  ),
  fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 16 })).map(([i, extra]): ByteMutation => (b) => {
    const j = at(b, i);
    return Uint8Array.from([...b.subarray(0, j), ...extra, ...b.subarray(j)]);
  }),
  fc.tuple(fc.nat(), fc.integer({ min: 1, max: 16 })).map(([i, n]): ByteMutation => (b) => {
    const j = at(b, i);
    return Uint8Array.from([...b.subarray(0, j), ...b.subarray(j + n)]);
  }),
  fc.tuple(fc.nat(), fc.integer({ min: 1, max: 16 }), fc.integer({ min: 1, max: 8 })).map(([i, n, times]): ByteMutation => (b) => {
    const j = at(b, i);
    const piece = b.subarray(j, j + n);
    return Uint8Array.from([...b.subarray(0, j), ...Array.from({ length: times }, () => [...piece]).flat(), ...b.subarray(j)]);
  }),
);

/** One to four mutations of one of `seeds`. */
export function mutatedBytes(seeds: readonly Uint8Array[]): fc.Arbitrary<Uint8Array> {
  return fc
    .tuple(fc.integer({ min: 0, max: seeds.length - 1 }), fc.array(byteMutation, { minLength: 1, maxLength: 4 }))
    .map(([s, ms]) => ms.reduce((b, m) => m(b), seeds[s]));
}

/** A string mutated as its UTF-8 bytes (invalid sequences decode to U+FFFD, as a reader of a file would see). */
export function mutatedText(seeds: readonly string[]): fc.Arbitrary<string> {
  return mutatedBytes(seeds.map((s) => Buffer.from(s, 'utf8'))).map((b) => Buffer.from(b).toString('utf8'));
}

/** A JSON value (what a body parser yields). */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** Paths to every value inside `v` (object keys and array indexes), the root included. */
function paths(v: Json, prefix: (string | number)[] = []): (string | number)[][] {
  const out = [prefix];
  if (Array.isArray(v)) v.forEach((x, i) => out.push(...paths(x, [...prefix, i])));
  else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) out.push(...paths(x, [...prefix, k]));
  return out;
}

function setAt(v: Json, path: (string | number)[], value: Json | undefined): Json {
  if (path.length === 0) return value === undefined ? null : value;
  const [head, ...rest] = path;
  if (Array.isArray(v)) {
    const copy = [...v];
    if (value === undefined && rest.length === 0) copy.splice(head as number, 1);
    else copy[head as number] = setAt(copy[head as number], rest, value);
    return copy;
  }
  if (v !== null && typeof v === 'object') {
    const copy: { [k: string]: Json } = { ...v };
    if (value === undefined && rest.length === 0) delete copy[head as string];
    else copy[head as string] = setAt(copy[head as string], rest, value);
    return copy;
  }
  return v;
}

/** Keys the parsers must take as data, never as the object machinery. */
const HOSTILE_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', ''];

/**
 * One to three structural mutations of one of `seeds`: a value replaced by any JSON value (huge
 * numbers, NaN-free, deep nesting, long strings), a key removed, or a key added (hostile names
 * among them).
 */
export function mutatedJson(seeds: readonly Json[]): fc.Arbitrary<Json> {
  const anyValue = fc.oneof(
    fc.jsonValue({ maxDepth: 4 }) as fc.Arbitrary<Json>,
    fc.constantFrom<Json>(-1, 0, 2 ** 31, 2 ** 53, -(2 ** 53), 1e308, 0.5, '', 'x'.repeat(10_000), [], {}),
  );
  const mutation = fc.tuple(
    fc.nat(),
    fc.oneof(
      fc.constant<'remove'>('remove'),
      anyValue.map((v) => ({ set: v })),
      fc.tuple(fc.constantFrom(...HOSTILE_KEYS, 'extra'), anyValue),
    ),
  );
  return fc.tuple(fc.integer({ min: 0, max: seeds.length - 1 }), fc.array(mutation, { minLength: 1, maxLength: 3 })).map(([s, ms]) =>
    ms.reduce<Json>((v, [i, m]) => {
      const all = paths(v);
      const p = all[i % all.length];
      if (m === 'remove') return p.length === 0 ? v : setAt(v, p, undefined);
      if (!Array.isArray(m)) return setAt(v, p, m.set);
      // Add a key to the object at p (or to the root when p is not an object), as an own data
      // property even for `__proto__`, as JSON.parse makes it.
      const [key, value] = m;
      const target = p.length === 0 ? v : p.reduce<Json>((x, k) => (x as Record<string | number, Json>)[k], v);
      if (target === null || typeof target !== 'object' || Array.isArray(target)) return v;
      const withKey: { [k: string]: Json } = { ...target };
      Object.defineProperty(withKey, key, { value, enumerable: true, writable: true, configurable: true });
      return p.length === 0 ? withKey : setAt(v, p, withKey);
    }, seeds[s]),
  );
}

/** What one case did: `value` or the name of the typed error, and its time. */
export interface CaseOutcome {
  kind: 'value' | 'typed-error';
  ms: number;
}

/**
 * Runs `target` on one input: it must return, or throw an error `isTyped` accepts, within
 * `boundMs`. Anything else (another error, a hang past the bound) fails the property with the
 * input in the message, so fast-check shrinks it and the report shows it.
 */
export function checkCase<T>(target: () => unknown, isTyped: (e: unknown) => boolean, boundMs: number, describeInput: () => T): CaseOutcome {
  const t0 = process.hrtime.bigint();
  let kind: CaseOutcome['kind'] = 'value';
  try {
    target();
  } catch (e) {
    if (!isTyped(e)) throw new Error(`untyped failure ${(e as Error)?.name}: ${(e as Error)?.message} on ${JSON.stringify(describeInput())}`);
    kind = 'typed-error';
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (ms > boundMs) throw new Error(`took ${ms.toFixed(1)} ms (bound ${boundMs} ms) on ${JSON.stringify(describeInput())}`);
  return { kind, ms };
}

/** Tally of a fuzz run, for the spec's own assertions (both outcomes must occur) and its log line. */
export class FuzzTally {
  values = 0;
  errors = 0;
  slowestMs = 0;

  add(o: CaseOutcome): void {
    if (o.kind === 'value') this.values++;
    else this.errors++;
    this.slowestMs = Math.max(this.slowestMs, o.ms);
  }

  get cases(): number {
    return this.values + this.errors;
  }
}

/** Fixed seed unless SRPO_FUZZ_SEED says otherwise, so a CI failure is reproducible; runs scale with SRPO_FUZZ_SCALE. */
export function fuzzParameters(numRuns: number, env: Readonly<Record<string, string | undefined>> = process.env): { seed: number; numRuns: number } {
  const seed = env.SRPO_FUZZ_SEED === undefined ? 20261207 : Number(env.SRPO_FUZZ_SEED);
  const scale = env.SRPO_FUZZ_SCALE === undefined ? 1 : Number(env.SRPO_FUZZ_SCALE);
  if (!Number.isInteger(seed)) throw new Error(`SRPO_FUZZ_SEED must be an integer, got ${env.SRPO_FUZZ_SEED}`);
  if (!(scale > 0)) throw new Error(`SRPO_FUZZ_SCALE must be > 0, got ${env.SRPO_FUZZ_SCALE}`);
  return { seed, numRuns: Math.max(1, Math.round(numRuns * scale)) };
}
