import { progressCoverage } from '@srpo/srpo';
import { SeededRng } from '@srpo/policy';
import { Tok } from '../tokenizer';
import {
  checkSearchSettings,
  observationDigest,
  observe,
  sampleSearchTask,
  searchContext,
  searchSuccess,
  START_DIGEST,
  type SearchTask,
} from './doc-search.env';

const D = (d: number) => Tok.DIGIT0 + d;
const DOC = (j: number) => Tok.DOC0 + j;

// Start at doc 1, which points to doc 3, which holds 2; docs 0 and 2 are distractors.
const task: SearchTask = {
  start: 1,
  docs: [
    [Tok.VAL, D(0)],
    [Tok.PTR, DOC(3)],
    [Tok.PTR, DOC(0)],
    [Tok.VAL, D(2)],
  ],
  value: 2,
};

describe('document-search environment', () => {
  it('reading a document returns its two tokens; any other token reads nothing', () => {
    expect(observe(task, DOC(1))).toEqual([Tok.PTR, DOC(3)]);
    expect(observe(task, DOC(3))).toEqual([Tok.VAL, D(2)]);
    expect(observe(task, D(1))).toEqual([Tok.NOTHING, Tok.NOTHING]);
    expect(observe(task, DOC(5))).toEqual([Tok.NOTHING, Tok.NOTHING]); // beyond this store's 4 documents
  });

  it('the context lists the question, then every query with what it returned', () => {
    expect(searchContext(task, [])).toEqual([Tok.BOS, Tok.SEARCH, DOC(1), Tok.SEP]);
    expect(searchContext(task, [{ query: DOC(1), observation: [Tok.PTR, DOC(3)] }])).toEqual([Tok.BOS, Tok.SEARCH, DOC(1), Tok.SEP, DOC(1), Tok.PTR, DOC(3)]);
  });

  it('succeeds only with the value at the end of the chain', () => {
    expect(searchSuccess(task, D(2))).toBe(true);
    expect(searchSuccess(task, D(0))).toBe(false);
  });

  it('progress coverage from the recorded digests: following the chain beats reading nothing twice', () => {
    const chain = [START_DIGEST, observationDigest(observe(task, DOC(1))), observationDigest(observe(task, DOC(3))), 'obs:answered'];
    const idle = [START_DIGEST, observationDigest(observe(task, D(0))), observationDigest(observe(task, D(1))), 'obs:answered'];
    expect(progressCoverage(chain, 3)).toBe(1);
    expect(progressCoverage(idle, 3)).toBeCloseTo(2 / 3, 12);
  });

  it('sampled tasks are well formed: the start points to a different document that holds the value', () => {
    const rng = new SeededRng(11);
    for (let i = 0; i < 200; i++) {
      const t = sampleSearchTask(rng, { modulus: 4, docs: 4, turns: 3 });
      const [kind, target] = t.docs[t.start];
      expect(kind).toBe(Tok.PTR);
      const hop = target - Tok.DOC0;
      expect(hop).not.toBe(t.start);
      expect(t.docs[hop]).toEqual([Tok.VAL, D(t.value)]);
    }
    expect(() => checkSearchSettings({ modulus: 4, docs: 7, turns: 3 })).toThrow(/docs/);
  });
});
