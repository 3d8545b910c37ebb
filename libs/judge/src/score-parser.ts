/** The scores a judge may give, inclusive; anything outside is garbage, not clamped. */
export interface ScoreRange {
  min: number;
  max: number;
}

export type ParsedScore = { ok: true; rawScore: number; reward: number } | { ok: false; problem: string };

/** Longest answer searched for a score: a judge that writes a book is not read to the end. */
export const MAX_ANSWER_CHARS = 16_384;

const NUMBER = '[-+]?(?:\\d+(?:\\.\\d*)?|\\.\\d+)(?:[eE][-+]?\\d+)?';
/** `Score: 7`, `score = 7.5`, `**Score:** 7/10` on a line of its own (markdown emphasis allowed). */
const SCORE_LINE = new RegExp(`^[\\s*_#>-]*score[\\s*_]*[:=][\\s*_]*(${NUMBER})[\\s*_]*(?:/\\s*${NUMBER})?[\\s*_.]*$`, 'gim');
/** A flat JSON object holding a `score` member (the answer may wrap it in prose or a code fence). */
const JSON_OBJECT = /\{[^{}]*"score"[^{}]*\}/g;

/**
 * Reads a judge's answer: a JSON object `{"score": x}` (alone, fenced, or inside prose) or a
 * `Score: x` line. The score must lie in `range`; it maps linearly onto a reward in [0, 1]
 * (`min` → 0, `max` → 1). Two different scores, no score, or one out of range is garbage:
 * a reward is never guessed.
 */
export function parseScore(answer: string, range: ScoreRange): ParsedScore {
  if (answer.length > MAX_ANSWER_CHARS) return { ok: false, problem: `answer of ${answer.length} characters; the limit is ${MAX_ANSWER_CHARS}` };
  const found = new Set<number>();
  for (const m of answer.matchAll(JSON_OBJECT)) {
    try {
      const v = (JSON.parse(m[0]) as { score?: unknown }).score;
      const n = typeof v === 'number' ? v : typeof v === 'string' && new RegExp(`^\\s*${NUMBER}\\s*$`).test(v) ? Number(v) : NaN;
      if (Number.isFinite(n)) found.add(n);
    } catch {
      // Not JSON after all: the score line below may still hold it.
    }
  }
  for (const m of answer.matchAll(SCORE_LINE)) {
    const n = Number(m[1]);
    if (Number.isFinite(n)) found.add(n);
  }
  if (found.size === 0) return { ok: false, problem: 'no {"score": x} object and no "Score: x" line' };
  if (found.size > 1) return { ok: false, problem: `conflicting scores ${[...found].join(', ')}` };
  const rawScore = [...found][0];
  if (rawScore < range.min || rawScore > range.max) return { ok: false, problem: `score ${rawScore} outside ${range.min}..${range.max}` };
  return { ok: true, rawScore, reward: (rawScore - range.min) / (range.max - range.min) };
}

/** `0..10` → {min: 0, max: 10}; throws naming the text when it is not two finite numbers in order. */
export function parseScoreRange(text: string): ScoreRange {
  const m = new RegExp(`^\\s*(${NUMBER})\\s*\\.\\.\\s*(${NUMBER})\\s*$`).exec(text);
  if (!m) throw new Error(`expected MIN..MAX such as 0..10, got "${text}"`);
  const min = Number(m[1]);
  const max = Number(m[2]);
  if (!(min < max)) throw new Error(`MIN must be below MAX, got "${text}"`);
  return { min, max };
}
