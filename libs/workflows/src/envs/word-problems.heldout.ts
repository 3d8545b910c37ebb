import { ValidationError } from '@srpo/core';
import { generateWordProblem, type WordProblem, type WordProblemSettings } from './word-problems.env';

/**
 * Training and held-out problems never meet. Seeds split the 32-bit range: held-out problems come
 * from seeds at or above `WORD_PROBLEM_HELDOUT_SEED_BASE`, training problems from seeds below it. Small
 * difficulties have few distinct texts (add-10: about 22,000), so two seeds can still give the
 * same text; the training stream therefore also skips any problem whose text is in the held-out
 * set. Disjoint by seed and by text.
 */
export const WORD_PROBLEM_HELDOUT_SEED_BASE = 0x80000000;
/** The demo's held-out size: 200 problems give a 95 % interval of at most ±7 points. */
export const WORD_PROBLEM_HELDOUT_SIZE = 200;
export const WORD_PROBLEM_MAX_HELDOUT_SIZE = 10_000;

/**
 * `size` distinct problems (by text) from the seeds `WORD_PROBLEM_HELDOUT_SEED_BASE + offset + i`, in seed
 * order. The same arguments always give the same set.
 */
export function heldOutWordProblems(settings: WordProblemSettings, size = WORD_PROBLEM_HELDOUT_SIZE, offset = 0): WordProblem[] {
  if (!Number.isInteger(size) || size < 1 || size > WORD_PROBLEM_MAX_HELDOUT_SIZE)
    throw new ValidationError('size', `must be an integer in [1, ${WORD_PROBLEM_MAX_HELDOUT_SIZE}], got ${size}`);
  if (!Number.isInteger(offset) || offset < 0 || offset > 0x7fffffff - 100 * size)
    throw new ValidationError('offset', `must be an integer in [0, 2^31 - 100·size)`);
  const out: WordProblem[] = [];
  const seen = new Set<string>();
  // 100 seeds per wanted problem is far more than any difficulty needs; a space too small to
  // give `size` distinct problems is refused instead of looping.
  for (let i = 0; out.length < size && i < 100 * size; i++) {
    const p = generateWordProblem(WORD_PROBLEM_HELDOUT_SEED_BASE + offset + i, settings);
    if (seen.has(p.text)) continue;
    seen.add(p.text);
    out.push(p);
  }
  if (out.length < size) throw new ValidationError('size', `these settings give fewer than ${size} distinct problems`);
  return out;
}

/**
 * Training problems in order: problem `index` of the stream is the first seed from
 * `start + index · stride` on whose text is not held out. `heldOutTexts` is the set of the
 * held-out texts (`new Set(heldOut.map((p) => p.text))`).
 */
export class TrainingWordProblems {
  private static readonly STRIDE = 16;

  constructor(
    private readonly settings: WordProblemSettings,
    private readonly heldOutTexts: ReadonlySet<string>,
    private readonly start = 0,
  ) {
    if (!Number.isInteger(start) || start < 0 || start >= WORD_PROBLEM_HELDOUT_SEED_BASE)
      throw new ValidationError('start', `must be an integer in [0, 2^31), got ${start}`);
  }

  /** The problem at `index` (0-based); the same index always gives the same problem. */
  at(index: number): WordProblem {
    if (!Number.isInteger(index) || index < 0) throw new ValidationError('index', `must be a non-negative integer, got ${index}`);
    const base = this.start + index * TrainingWordProblems.STRIDE;
    // Each index owns STRIDE seeds, so skipping a held-out text never borrows the next index's seed.
    for (let k = 0; k < TrainingWordProblems.STRIDE; k++) {
      const seed = base + k;
      if (seed >= WORD_PROBLEM_HELDOUT_SEED_BASE) break;
      const p = generateWordProblem(seed, this.settings);
      if (!this.heldOutTexts.has(p.text)) return p;
    }
    throw new ValidationError('index', `no training problem at ${index}: its seeds are exhausted or all held out`);
  }
}
