import { ValidationError } from '@srpo/core';
import { SeededRng } from '@srpo/policy';

/**
 * Arithmetic word problems in plain English, for real instruct LLMs (SmolLM2-135M-Instruct in the
 * demo). A problem is a pure function of its seed and the difficulty settings, so a seed names a
 * problem everywhere (agents, held-out set, tests). The reward is a program: the exact integer
 * answer, parsed from free text. `bench/studies/llm-task/` measured which settings the base model
 * solves often enough, and with enough disagreement between samples, to learn from.
 */
export const WORD_OPS = ['add', 'sub', 'mul', 'div'] as const;
export type WordOp = (typeof WORD_OPS)[number];

export interface WordProblemSettings {
  /** Operations the first step draws from. Products and quotients use factors of at most 12. */
  ops: readonly WordOp[];
  /** Largest operand of an addition or subtraction (2..1000). */
  maxOperand: number;
  /** 1: one operation; 2..3: more additions or subtractions follow ("Then Sam loses 4 apples."). */
  steps: number;
}

export interface WordProblem {
  seed: number;
  text: string;
  answer: number;
}

export const WORD_PROBLEM_MAX_OPERAND = 1000;
export const WORD_PROBLEM_MAX_STEPS = 3;
/** The factor range of products and quotients: times tables. */
const MAX_FACTOR = 12;

/** Difficulties measured in `bench/studies/llm-task/README.md`, by name. */
export const WORD_PROBLEM_VARIANTS = {
  'add-10': { ops: ['add'], maxOperand: 10, steps: 1 },
  'addsub-10': { ops: ['add', 'sub'], maxOperand: 10, steps: 1 },
  'addsub-20': { ops: ['add', 'sub'], maxOperand: 20, steps: 1 },
  'addsub-100': { ops: ['add', 'sub'], maxOperand: 100, steps: 1 },
  'mixed-12': { ops: ['add', 'sub', 'mul', 'div'], maxOperand: 12, steps: 1 },
  'addsub-20x2': { ops: ['add', 'sub'], maxOperand: 20, steps: 2 },
} as const satisfies Record<string, WordProblemSettings>;
export type WordProblemVariant = keyof typeof WORD_PROBLEM_VARIANTS;

export const WORD_PROBLEM_NAMES = ['Sam', 'Mia', 'Leo', 'Ava', 'Tom', 'Zoe', 'Ben', 'Lily', 'Max', 'Emma', 'Noah', 'Ella'] as const;
export const WORD_PROBLEM_ITEMS = ['apples', 'books', 'pencils', 'stickers', 'marbles', 'cookies', 'cards', 'shells', 'coins', 'stamps'] as const;

export function checkWordProblemSettings(s: WordProblemSettings): WordProblemSettings {
  if (s.ops.length === 0 || s.ops.some((op) => !WORD_OPS.includes(op))) throw new ValidationError('ops', `must be a non-empty list of ${WORD_OPS.join(', ')}`);
  if (!Number.isInteger(s.maxOperand) || s.maxOperand < 2 || s.maxOperand > WORD_PROBLEM_MAX_OPERAND)
    throw new ValidationError('maxOperand', `must be an integer in [2, ${WORD_PROBLEM_MAX_OPERAND}], got ${s.maxOperand}`);
  if (!Number.isInteger(s.steps) || s.steps < 1 || s.steps > WORD_PROBLEM_MAX_STEPS)
    throw new ValidationError('steps', `must be an integer in [1, ${WORD_PROBLEM_MAX_STEPS}], got ${s.steps}`);
  return s;
}

/** Uniform integer in [lo, hi]. */
function between(r: SeededRng, lo: number, hi: number): number {
  return lo + r.nextInt(hi - lo + 1);
}

function pick<T>(r: SeededRng, xs: readonly T[]): T {
  return xs[r.nextInt(xs.length)];
}

interface FirstStep {
  statement: string;
  question: string;
  value: number;
}

/** The first operation, in one of two templates: a person's own items (0) or a box (1). */
function firstStep(r: SeededRng, op: WordOp, name: string, item: string, template: 0 | 1, maxOperand: number): FirstStep {
  const f = Math.min(maxOperand, MAX_FACTOR);
  switch (op) {
    case 'add': {
      const a = between(r, 2, maxOperand);
      const b = between(r, 1, maxOperand);
      return template === 0
        ? { statement: `${name} has ${a} ${item}. ${name} gets ${b} more ${item}.`, question: `How many ${item} does ${name} have now?`, value: a + b }
        : { statement: `There are ${a} ${item} in a box. ${name} puts in ${b} more.`, question: `How many ${item} are in the box now?`, value: a + b };
    }
    case 'sub': {
      const a = between(r, 2, maxOperand);
      const b = between(r, 1, a - 1);
      return template === 0
        ? { statement: `${name} has ${a} ${item}. ${name} gives ${b} ${item} to a friend.`, question: `How many ${item} does ${name} have now?`, value: a - b }
        : { statement: `There are ${a} ${item} in a box. ${name} takes out ${b}.`, question: `How many ${item} are in the box now?`, value: a - b };
    }
    case 'mul': {
      const a = between(r, 2, f);
      const b = between(r, 2, f);
      return template === 0
        ? { statement: `${name} has ${a} bags with ${b} ${item} in each bag.`, question: `How many ${item} does ${name} have in all?`, value: a * b }
        : { statement: `There are ${a} boxes. Each box holds ${b} ${item}.`, question: `How many ${item} are there in all?`, value: a * b };
    }
    case 'div': {
      const q = between(r, 2, f);
      const b = between(r, 2, f);
      return template === 0
        ? { statement: `${name} shares ${q * b} ${item} equally among ${b} friends.`, question: `How many ${item} does each friend get?`, value: q }
        : { statement: `${name} puts ${q * b} ${item} into ${b} equal piles.`, question: `How many ${item} are in each pile?`, value: q };
    }
  }
}

/**
 * The problem of a seed: deterministic, and independent of any other problem drawn (so a seed
 * names one problem across processes). Seeds are integers in [0, 2³²).
 */
export function generateWordProblem(seed: number, settings: WordProblemSettings): WordProblem {
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new ValidationError('seed', `must be an integer in [0, 2^32), got ${seed}`);
  const s = checkWordProblemSettings(settings);
  const r = new SeededRng(seed);
  const name = pick(r, WORD_PROBLEM_NAMES);
  const item = pick(r, WORD_PROBLEM_ITEMS);
  const op = pick(r, s.ops);
  // A chain goes on with the named person, so it starts from their template.
  const template: 0 | 1 = s.steps > 1 ? 0 : r.nextInt(2) === 0 ? 0 : 1;
  const first = firstStep(r, op, name, item, template, s.maxOperand);
  let { statement, question, value } = first;
  for (let i = 1; i < s.steps; i++) {
    if (value > 1 && r.nextFloat() < 0.5) {
      const b = between(r, 1, Math.min(value - 1, s.maxOperand));
      statement += ` Then ${name} loses ${b} ${item}.`;
      value -= b;
    } else {
      const b = between(r, 1, s.maxOperand);
      statement += ` Then ${name} finds ${b} more ${item}.`;
      value += b;
    }
    question = `How many ${item} does ${name} have now?`;
  }
  return { seed, text: `${statement} ${question}`, answer: value };
}

/** A chat message in the OpenAI shape the model's chat template reads. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** What the solver is told about the format (`tagged` prompt); the parser also takes a bare last number. */
export const SOLVER_INSTRUCTION = "Solve the problem. End your reply with a line of the form 'Answer: <number>'.";
/** The same, once, as the system prompt of the `shots` prompt. */
export const SOLVER_SYSTEM_PROMPT = "Solve each problem. End with 'Answer: <number>'.";

/**
 * Worked examples the `shots` prompt shows before the problem: a one-line computation, then the
 * tagged answer. A 135M model copies this format (short replies, an `Answer:` line) far more
 * often than it follows the instruction alone (bench/studies/llm-task/README.md). Their names
 * and items are outside the generator's lists, so no problem equals one.
 */
export const WORD_PROBLEM_SHOTS: readonly { problem: string; reply: string }[] = [
  { problem: 'Ann has 7 pens. Ann gets 5 more pens. How many pens does Ann have now?', reply: '7 + 5 = 12\nAnswer: 12' },
  { problem: 'There are 9 cups in a box. Jo takes out 4. How many cups are in the box now?', reply: '9 - 4 = 5\nAnswer: 5' },
];

/**
 * `shots` (the default): the format as the system prompt, the worked examples as earlier turns,
 * then the problem (146 tokens in SmolLM2's template). `tagged`: the problem and the instruction
 * in one user turn, after the template's default system prompt (77 tokens).
 */
export type SolverPromptStyle = 'tagged' | 'shots';

export function solverMessages(p: WordProblem, style: SolverPromptStyle = 'shots'): ChatMessage[] {
  if (style === 'tagged') return [{ role: 'user', content: `${p.text}\n${SOLVER_INSTRUCTION}` }];
  return [
    { role: 'system', content: SOLVER_SYSTEM_PROMPT },
    ...WORD_PROBLEM_SHOTS.flatMap((s): ChatMessage[] => [
      { role: 'user', content: s.problem },
      { role: 'assistant', content: s.reply },
    ]),
    { role: 'user', content: p.text },
  ];
}

const ANSWER_RE = /answer\s*(?:is)?\s*[:=]?\s*\**\s*(-?\d[\d,]*(?:\.\d+)?)/gi;
const NUMBER_RE = /-?\d[\d,]*(?:\.\d+)?/g;

function toInteger(s: string): number | undefined {
  const v = Number(s.replace(/,/g, ''));
  return Number.isFinite(v) && Number.isInteger(v) ? v : undefined;
}

/**
 * The answer in a reply: the last "Answer: N" (also "answer is N", "Answer = **N**"), else the
 * last number in the text; `undefined` when there is none or it is not an integer ("2.5").
 * Thousands separators are read ("1,234"), and "12.0" is 12.
 */
export function parseNumericAnswer(text: string): number | undefined {
  const tagged = [...text.matchAll(ANSWER_RE)];
  if (tagged.length > 0) return toInteger(tagged[tagged.length - 1][1]);
  const numbers = text.match(NUMBER_RE);
  return numbers ? toInteger(numbers[numbers.length - 1]) : undefined;
}

export interface SolverGrade {
  /** 1 for the exact answer; else `formatBonus` when the reply has an "Answer: N" line; else 0. */
  reward: number;
  correct: boolean;
  /** The parsed answer, if any. */
  answer: number | undefined;
}

/**
 * The solver's reward. `formatBonus` (default 0) pays a tagged but wrong answer a little, for a
 * model that does not yet follow the format; success never includes it.
 */
export function gradeSolver(p: WordProblem, reply: string, formatBonus = 0): SolverGrade {
  if (!(formatBonus >= 0 && formatBonus < 1)) throw new ValidationError('formatBonus', `must be in [0, 1), got ${formatBonus}`);
  const answer = parseNumericAnswer(reply);
  const correct = answer === p.answer;
  ANSWER_RE.lastIndex = 0;
  const tagged = ANSWER_RE.test(reply);
  ANSWER_RE.lastIndex = 0;
  return { reward: correct ? 1 : tagged ? formatBonus : 0, correct, answer };
}

/** The verifier's system prompt: what to do and the verdict format. */
export const VERIFIER_SYSTEM_PROMPT = "Check the proposed answer to each problem. End with 'Verdict: correct' or 'Verdict: incorrect'.";

/** Worked examples for the verifier, one right and one wrong proposal, in the solver's style. */
export const VERIFIER_SHOTS: readonly { problem: string; proposed: number; reply: string }[] = [
  { problem: WORD_PROBLEM_SHOTS[0].problem, proposed: 12, reply: '7 + 5 = 12, and 12 is proposed.\nVerdict: correct' },
  { problem: WORD_PROBLEM_SHOTS[1].problem, proposed: 6, reply: '9 - 4 = 5, but 6 is proposed.\nVerdict: incorrect' },
];

const verifierTurn = (problem: string, proposed: number | undefined): ChatMessage => ({
  role: 'user',
  content: `Problem: ${problem}\nProposed answer: ${proposed === undefined ? '(no number given)' : String(proposed)}`,
});

/** The verifier sees the problem and a proposed answer (the solver's, or none it could parse), after the worked examples. */
export function verifierMessages(p: WordProblem, proposed: number | undefined): ChatMessage[] {
  return [
    { role: 'system', content: VERIFIER_SYSTEM_PROMPT },
    ...VERIFIER_SHOTS.flatMap((s): ChatMessage[] => [verifierTurn(s.problem, s.proposed), { role: 'assistant', content: s.reply }]),
    verifierTurn(p.text, proposed),
  ];
}

const VERDICT_TAG_RE = /verdict\s*[:=]?\s*\**\s*(incorrect|correct|wrong|right)\b/gi;
const VERDICT_WORD_RE = /\b(incorrect|not correct|correct|wrong|right|yes|no)\b/i;

/**
 * The verdict in a reply: the last "Verdict: correct|incorrect" (or right/wrong), else the first
 * verdict word ("Yes, ..." / "No, ..." / "... is incorrect"); `undefined` when there is none.
 * true means "the proposed answer is correct".
 */
export function parseVerdict(text: string): boolean | undefined {
  const tagged = [...text.matchAll(VERDICT_TAG_RE)];
  const word = tagged.length > 0 ? tagged[tagged.length - 1][1] : text.match(VERDICT_WORD_RE)?.[1];
  if (word === undefined) return undefined;
  return ['correct', 'right', 'yes'].includes(word.toLowerCase());
}

export interface VerifierGrade {
  /** 1 for the right verdict, 0 for a wrong or missing one. */
  reward: number;
  verdict: boolean | undefined;
  /** Whether the proposed answer was in fact correct. */
  truth: boolean;
}

export function gradeVerifier(p: WordProblem, proposed: number | undefined, reply: string): VerifierGrade {
  const verdict = parseVerdict(reply);
  const truth = proposed === p.answer;
  return { reward: verdict !== undefined && verdict === truth ? 1 : 0, verdict, truth };
}
