import * as fs from 'fs';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { REFERENCE_CASES_PATH, REGENERATE_REFERENCE_CASES, referenceCases, referenceCasesText, type ReferenceCaseFile } from './test/reference-cases';

/**
 * The fixture of the Python implementations (examples/python-trainer/fixtures/srpo-reference-cases.json)
 * cannot drift from the reference: recomputed here by objectiveLoss, it must equal the checked-in
 * file value for value (the cpu backend gives the same float32 bits on every machine).
 */
describe('SRPO reference cases for the Python implementations', () => {
  let fresh: ReferenceCaseFile;
  let checkedIn: ReferenceCaseFile;

  beforeAll(async () => {
    fresh = await referenceCases();
    checkedIn = JSON.parse(fs.readFileSync(path.join(repoRoot(), REFERENCE_CASES_PATH), 'utf8')) as ReferenceCaseFile;
  });

  it(`equals what libs/srpo computes now (else: ${REGENERATE_REFERENCE_CASES})`, () => {
    expect(checkedIn.cases.map((c) => c.name)).toEqual(fresh.cases.map((c) => c.name));
    for (const [i, c] of fresh.cases.entries()) expect({ case: c.name, ...checkedIn.cases[i] }).toEqual({ case: c.name, ...c });
    expect(fs.readFileSync(path.join(repoRoot(), REFERENCE_CASES_PATH), 'utf8')).toBe(referenceCasesText(fresh));
  });

  it('covers the edge cases the objective documents', () => {
    const all = fresh.cases;
    const some = (f: (c: (typeof all)[number]) => boolean) => all.some(f);
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    expect(some((c) => sum(c.expected.clippedLow) > 0 && sum(c.expected.clippedHigh) > 0)).toBe(true);
    expect(some((c) => sum(c.expected.clippedDual) > 0)).toBe(true);
    expect(some((c) => sum(c.expected.outOfRange) > 0 && c.config.dualClip && typeof c.expected.loss === 'number')).toBe(true);
    expect(some((c) => sum(c.expected.outOfRange) > 0 && !c.config.dualClip && typeof c.expected.loss === 'number')).toBe(true);
    expect(some((c) => c.expected.loss === 'NaN')).toBe(true);
    expect(some((c) => c.logpNew.flat().includes('-Infinity') && typeof c.expected.loss === 'number')).toBe(true);
    expect(some((c) => c.expected.setSize.every((k) => k === 1))).toBe(true);
    for (const r of ['sqrt', 'sum', 'mean'] as const) expect(some((c) => c.config.eventReduction === r)).toBe(true);
    // Every finite case has a non-zero gradient somewhere: the Python side is checked on it.
    for (const c of all.filter((x) => typeof x.expected.loss === 'number'))
      expect({ [c.name]: c.expected.grad.flat().some((g) => typeof g === 'number' && g !== 0) }).toEqual({ [c.name]: true });
  });
});
