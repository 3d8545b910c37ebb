import { ValidationError } from '@srpo/core';
import type { SeededRng } from '@srpo/policy';
import { digit, doc, docIndex, MAX_DOCS, Tok } from '../tokenizer';

/**
 * A synthetic document store for the multi-turn search workflow.
 *
 * Each task hides a value behind a two-hop chain: the start document points to
 * another document (`PTR DOCj`), which holds the value (`VAL d`); the other
 * documents are distractors. Every turn the searcher emits one token: a document
 * id reads that document (its two tokens become the observation), anything else
 * reads nothing. The token of the last turn is the answer.
 *
 * A random policy almost never answers right, so whole groups fail: that is
 * where ProGPO's progress fallback (first-visit observation coverage) gives the
 * only learning signal, and why every observation is recorded as a digest.
 */
export interface SearchTask {
  start: number;
  /** Two content tokens per document. */
  docs: [number, number][];
  /** The digit at the end of the chain. */
  value: number;
}

export interface SearchSettings {
  modulus: number;
  /** Documents in the store (2..6). */
  docs: number;
  /** Turns per episode, the last one answering (>= 1). */
  turns: number;
}

export const DEFAULT_SEARCH: SearchSettings = { modulus: 4, docs: 4, turns: 3 };

export function checkSearchSettings(s: SearchSettings): SearchSettings {
  if (!Number.isInteger(s.docs) || s.docs < 2 || s.docs > MAX_DOCS) throw new ValidationError('docs', `must be an integer in [2, ${MAX_DOCS}], got ${s.docs}`);
  if (!Number.isInteger(s.turns) || s.turns < 1 || s.turns > 6) throw new ValidationError('turns', `must be an integer in [1, 6], got ${s.turns}`);
  return s;
}

export function sampleSearchTask(rng: SeededRng, s: SearchSettings): SearchTask {
  const start = rng.nextInt(s.docs);
  const hop = (start + 1 + rng.nextInt(s.docs - 1)) % s.docs;
  const value = rng.nextInt(s.modulus);
  const docs: [number, number][] = Array.from({ length: s.docs }, (_, j) => {
    if (j === start) return [Tok.PTR, doc(hop)];
    if (j === hop) return [Tok.VAL, digit(value)];
    // Distractors: a pointer back into the store or a wrong value.
    return rng.nextFloat() < 0.5 ? [Tok.PTR, doc(rng.nextInt(s.docs))] : [Tok.VAL, digit((value + 1 + rng.nextInt(s.modulus - 1)) % s.modulus)];
  });
  return { start, docs, value };
}

export interface SearchTurn {
  query: number;
  observation: [number, number];
}

/** The searcher's context at a turn: the question, then every query with what it returned. */
export function searchContext(t: SearchTask, history: readonly SearchTurn[]): number[] {
  return [Tok.BOS, Tok.SEARCH, doc(t.start), Tok.SEP, ...history.flatMap((h) => [h.query, ...h.observation])];
}

export function observe(t: SearchTask, query: number): [number, number] {
  const j = docIndex(query);
  return j !== undefined && j < t.docs.length ? [...t.docs[j]] : [Tok.NOTHING, Tok.NOTHING];
}

/** Digest of what a turn revealed; equal observations share a digest, so loops earn no coverage. */
export function observationDigest(observation: readonly number[]): string {
  return `obs:${observation.join('.')}`;
}

export const START_DIGEST = 'obs:start';

export function searchSuccess(t: SearchTask, answer: number): boolean {
  return answer === digit(t.value);
}
