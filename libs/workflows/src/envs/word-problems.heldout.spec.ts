import { generateWordProblem, WORD_PROBLEM_VARIANTS } from './word-problems.env';
import { WORD_PROBLEM_HELDOUT_SIZE, WORD_PROBLEM_HELDOUT_SEED_BASE, heldOutWordProblems, TrainingWordProblems } from './word-problems.heldout';

describe('held-out word problems', () => {
  it.each(Object.keys(WORD_PROBLEM_VARIANTS) as (keyof typeof WORD_PROBLEM_VARIANTS)[])(
    '%s: 200 distinct problems from held-out seeds, the same every time, disjoint from 20,000 training problems by seed and text',
    (variant) => {
      const s = WORD_PROBLEM_VARIANTS[variant];
      const held = heldOutWordProblems(s);
      expect(held).toHaveLength(WORD_PROBLEM_HELDOUT_SIZE);
      expect(heldOutWordProblems(s)).toEqual(held);
      expect(new Set(held.map((p) => p.text)).size).toBe(held.length);
      for (const p of held) expect(p.seed).toBeGreaterThanOrEqual(WORD_PROBLEM_HELDOUT_SEED_BASE);

      const texts = new Set(held.map((p) => p.text));
      const train = new TrainingWordProblems(s, texts);
      for (let i = 0; i < 20_000; i++) {
        const p = train.at(i);
        expect(p.seed).toBeLessThan(WORD_PROBLEM_HELDOUT_SEED_BASE);
        if (texts.has(p.text)) throw new Error(`training problem ${i} (seed ${p.seed}) is held out: ${p.text}`);
      }
    },
  );

  it('skips a held-out text in training: the smallest difficulty does collide by text, and the stream steps over it', () => {
    const s = WORD_PROBLEM_VARIANTS['add-10'];
    const texts = new Set(heldOutWordProblems(s).map((p) => p.text));
    // Without the filter, some of the first 20,000 training seeds repeat a held-out text (about 22,000 texts exist).
    let collisions = 0;
    for (let seed = 0; seed < 20_000 * 16; seed += 16) if (texts.has(generateWordProblem(seed, s).text)) collisions++;
    expect(collisions).toBeGreaterThan(0);
    const train = new TrainingWordProblems(s, texts);
    expect(train.at(5)).toEqual(train.at(5));
    expect(train.at(5).text).not.toBe(train.at(6).text);
  });

  it('refuses bad sizes, offsets and indices naming the field', () => {
    const s = WORD_PROBLEM_VARIANTS['addsub-20'];
    expect(() => heldOutWordProblems(s, 0)).toThrow(/size/);
    expect(() => heldOutWordProblems(s, 200, -1)).toThrow(/offset/);
    expect(() => new TrainingWordProblems(s, new Set(), WORD_PROBLEM_HELDOUT_SEED_BASE)).toThrow(/start/);
    expect(() => new TrainingWordProblems(s, new Set()).at(-1)).toThrow(/index/);
  });
});
