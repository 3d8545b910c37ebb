import { SeededRng } from './rng';

describe('SeededRng', () => {
  it('repeats for a seed and differs across seeds', () => {
    const a = new SeededRng(42);
    const b = new SeededRng(42);
    const c = new SeededRng(43);
    const xs = Array.from({ length: 8 }, () => a.nextUint32());
    expect(Array.from({ length: 8 }, () => b.nextUint32())).toEqual(xs);
    expect(Array.from({ length: 8 }, () => c.nextUint32())).not.toEqual(xs);
  });

  it('draws floats in [0, 1) and normals with the right moments', () => {
    const rng = new SeededRng(1);
    let sum = 0;
    let sq = 0;
    const n = 20000;
    for (let i = 0; i < n; i++) {
      const u = rng.nextFloat();
      expect(u >= 0 && u < 1).toBe(true);
      const z = rng.nextNormal();
      sum += z;
      sq += z * z;
    }
    expect(Math.abs(sum / n)).toBeLessThan(0.03);
    expect(Math.abs(sq / n - 1)).toBeLessThan(0.05);
    const ints = new Set(Array.from({ length: 200 }, () => rng.nextInt(5)));
    expect([...ints].sort()).toEqual([0, 1, 2, 3, 4]);
  });

  it('refuses a non-finite seed', () => {
    expect(() => new SeededRng(Number.NaN)).toThrow(/seed/);
  });
});
