import { ValidationError } from '@srpo/core';
import type { RewardInput, Scorer } from './judge-input';
import { buildOutcome } from './outcome-builder';

const scorer: Scorer = {
  verifier: 'judge:gpt-judge',
  details: { judgeModel: 'gpt-judge', promptSha256: 'abc', rubric: 'math.txt', endpointHost: 'judge.local:8443', scoreRange: '0..10' },
  score: () => Promise.reject(new Error('not called')),
};

const text = (outputId: string, step: number) => ({
  outputId,
  step,
  role: 'solver',
  agentId: 'a',
  policyId: 'actor',
  policyVersion: 2,
  prompt: 'p',
  response: 'r',
});
const input = (outputs = [text('e1/o0', 0)]): RewardInput => ({ mode: 'episode', episodeId: 'e1', taskId: 'task-7', outputs });

describe('buildOutcome', () => {
  it('names the judge, the rubric, the endpoint and the score, at the judged event time', () => {
    const o = buildOutcome(
      scorer,
      { reward: 0.7, rawScore: 7, details: { judgeVersion: 'gpt-judge-2026-01-01' } },
      input([text('e1/o0', 0), text('e1/o1', 1)]),
      {
        turns: 2,
        eventTimeMs: 1234,
        successThreshold: 5,
        rewardSource: 'judge',
      },
    );
    expect(o).toMatchObject({
      episodeId: 'e1',
      taskId: 'task-7',
      outcomeReward: 0.7,
      success: true,
      verifier: 'judge:gpt-judge',
      turns: 2,
      eventTimeMs: 1234,
      observationDigests: [],
      rewardSource: 'judge',
      revision: 0,
    });
    expect(o.verifierDetails).toEqual({
      judgeModel: 'gpt-judge',
      judgeVersion: 'gpt-judge-2026-01-01',
      promptSha256: 'abc',
      rubric: 'math.txt',
      endpointHost: 'judge.local:8443',
      scoreRange: '0..10',
      rawScore: '7',
      mode: 'episode',
      judgedOutputs: 'e1/o0,e1/o1',
      policyVersions: 'actor@v2',
    });
  });

  it('fails below the threshold, and is the same event when judged again with the same score', () => {
    const ctx = { turns: 1, eventTimeMs: 99, successThreshold: 5, rewardSource: 'judge' };
    const a = buildOutcome(scorer, { reward: 0.4, rawScore: 4, details: {} }, input(), ctx);
    expect(a.success).toBe(false);
    expect(buildOutcome(scorer, { reward: 0.4, rawScore: 4, details: {} }, input(), ctx)).toEqual(a);
  });

  it('lists at most 16 judged outputs', () => {
    const many = Array.from({ length: 20 }, (_, i) => text(`e1/o${i}`, i));
    const o = buildOutcome(scorer, { reward: 1, rawScore: 10, details: {} }, input(many), {
      turns: 20,
      eventTimeMs: 1,
      successThreshold: 5,
      rewardSource: 'judge',
    });
    expect(o.verifierDetails.judgedOutputs.split(',')).toHaveLength(17);
    expect(o.verifierDetails.judgedOutputs.endsWith(',+4')).toBe(true);
  });

  it('refuses an outcome the SDK would refuse, naming the field', () => {
    expect(() =>
      buildOutcome(
        scorer,
        { reward: 1, rawScore: 10, details: {} },
        { ...input(), taskId: 'x'.repeat(300) },
        { turns: 1, eventTimeMs: 1, successThreshold: 5, rewardSource: 'judge' },
      ),
    ).toThrow(ValidationError);
    expect(() =>
      buildOutcome(
        scorer,
        { reward: 1, rawScore: 10, details: {} },
        { ...input(), taskId: '' },
        { turns: 1, eventTimeMs: 1, successThreshold: 5, rewardSource: 'judge' },
      ),
    ).toThrow(/EpisodeOutcome.taskId/);
  });
});
