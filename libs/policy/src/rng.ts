import { ValidationError } from '@srpo/core';

/**
 * A small seeded PRNG (xoshiro128**, seeded through splitmix32).
 *
 * Weight initialisation and sampling draw from this instead of `Math.random`
 * or `tf.randomNormal`, because those are either unseeded or backend-specific:
 * the same seed must give bit-identical weights on every backend and machine
 * so that replays can compare weight hashes.
 */
export class SeededRng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  private spareNormal: number | undefined;

  /** @param seed any finite number; only its low 32 bits (and the integer part) are used. */
  constructor(seed: number) {
    if (!Number.isFinite(seed)) throw new ValidationError('seed', `must be a finite number, got ${seed}`);
    let x = Math.trunc(seed) >>> 0;
    const next = (): number => {
      // splitmix32: spreads a possibly tiny seed over the 128-bit state.
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
    // An all-zero state would be a fixed point; splitmix32 makes it practically impossible, but be certain.
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** A uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform in [0, 1) with 53 bits of resolution. */
  nextFloat(): number {
    const hi = this.nextUint32() >>> 5; // 27 bits
    const lo = this.nextUint32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** A standard normal draw (Box-Muller; the second value of each pair is kept for the next call). */
  nextNormal(): number {
    if (this.spareNormal !== undefined) {
      const v = this.spareNormal;
      this.spareNormal = undefined;
      return v;
    }
    let u = 0;
    while (u === 0) u = this.nextFloat();
    const v = this.nextFloat();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spareNormal = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** `n` values from N(0, std²), as float32. */
  normalArray(n: number, std: number): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = this.nextNormal() * std;
    return out;
  }

  /** Uniform integer in [0, n). */
  nextInt(n: number): number {
    return Math.floor(this.nextFloat() * n);
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
