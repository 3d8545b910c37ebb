import { ValidationError } from '@srpo/core';
import { AgentOutput, EpisodeOutcome, Transition } from './event-types';
import { BEHAVIOUR_LOGPROB_FLOOR, floorLogProbCount, validateAgentOutput, validateEpisodeOutcome, validateTransition } from './event-validation';
import { sampleEvents } from './sample-events';

function fieldOf(fn: () => void): string | undefined {
  try {
    fn();
  } catch (e) {
    if (e instanceof ValidationError) return e.field;
    throw e;
  }
  return undefined;
}

describe('validateAgentOutput', () => {
  const base = sampleEvents(0).AgentOutput;
  const cases: [string, Partial<AgentOutput>, string][] = [
    ['empty output id', { outputId: '' }, 'AgentOutput.outputId'],
    ['empty subject', { subjectId: '' }, 'AgentOutput.subjectId'],
    ['10,000-character subject', { subjectId: 's'.repeat(10_000) }, 'AgentOutput.subjectId'],
    ['10,000-character episode id', { episodeId: 'e'.repeat(10_000) }, 'AgentOutput.episodeId'],
    ['negative step', { step: -1 }, 'AgentOutput.step'],
    ['absurd step', { step: 1e9 }, 'AgentOutput.step'],
    ['empty response', { responseTokenIds: [], behaviourLogProbs: [], lossMask: [] }, 'AgentOutput.responseTokenIds'],
    ['log-probs shorter than tokens', { behaviourLogProbs: [-1, -1] }, 'AgentOutput.behaviourLogProbs'],
    ['mask of another length', { lossMask: [true] }, 'AgentOutput.lossMask'],
    ['NaN log-prob', { behaviourLogProbs: [-1, NaN, -1] }, 'AgentOutput.behaviourLogProbs[1]'],
    ['+Infinity log-prob', { behaviourLogProbs: [Infinity, -1, -1] }, 'AgentOutput.behaviourLogProbs[0]'],
    ['-Infinity log-prob', { behaviourLogProbs: [-1, -1, -Infinity] }, 'AgentOutput.behaviourLogProbs[2]'],
    ['positive log-prob', { behaviourLogProbs: [-1, 0.5, -1] }, 'AgentOutput.behaviourLogProbs[1]'],
    ['all-false mask', { lossMask: [false, false, false] }, 'AgentOutput.lossMask'],
    ['negative token id', { responseTokenIds: [1, -2, 3] }, 'AgentOutput.responseTokenIds[1]'],
    ['zero temperature', { sampling: { ...base.sampling, temperature: 0 } }, 'AgentOutput.sampling.temperature'],
    ['event before start', { eventTimeMs: base.startedAtMs - 1 }, 'AgentOutput.eventTimeMs'],
    ['negative policy version', { policyVersion: -1 }, 'AgentOutput.policyVersion'],
  ];

  it('accepts the sample', () => {
    expect(() => validateAgentOutput(base)).not.toThrow();
  });

  it.each(cases)('refuses %s, naming %s', (_name, patch, field) => {
    expect(fieldOf(() => validateAgentOutput({ ...base, ...patch }))).toBe(field);
  });

  it('accepts floor log-probs (the OpenAI API and vLLM report −9999) and the most negative float32; floorLogProbCount counts trained ones', () => {
    for (const behaviourLogProbs of [
      [-9999, -1, -1],
      [-3.4e38, -1e4, -100],
    ]) {
      expect(() => validateAgentOutput({ ...base, behaviourLogProbs })).not.toThrow();
    }
    expect(BEHAVIOUR_LOGPROB_FLOOR).toBe(-100);
    expect(floorLogProbCount({ behaviourLogProbs: [-9999, -1, -100], lossMask: [true, true, true] })).toBe(2);
    expect(floorLogProbCount({ behaviourLogProbs: [-9999, -1, -99.99], lossMask: [false, true, true] })).toBe(0);
    expect(floorLogProbCount(base)).toBe(0);
  });
});

describe('validateTransition', () => {
  const base = sampleEvents(0).Transition;
  const cases: [string, Partial<Transition>, string][] = [
    ['no consumed outputs', { consumedOutputIds: [], expectedCardinality: 0 }, 'Transition.consumedOutputIds'],
    ['the same output twice', { consumedOutputIds: ['a', 'a'], expectedCardinality: 2 }, 'Transition.consumedOutputIds[1]'],
    ['cardinality disagreeing with the list', { consumedOutputIds: ['a', 'b'], expectedCardinality: 3 }, 'Transition.expectedCardinality'],
    ['non-finite reward', { reward: NaN }, 'Transition.reward'],
    ['infinite reward', { reward: -Infinity }, 'Transition.reward'],
    ['group size without group key', { groupKey: null, expectedGroupSize: 4 }, 'Transition.expectedGroupSize'],
    ['zero group size', { expectedGroupSize: 0 }, 'Transition.expectedGroupSize'],
    ['empty task id', { taskId: '' }, 'Transition.taskId'],
    ['empty consumed id', { consumedOutputIds: [''], expectedCardinality: 1 }, 'Transition.consumedOutputIds[0]'],
    ['empty reward source', { rewardSource: '' }, 'Transition.rewardSource'],
    ['65-character reward source', { rewardSource: 'h'.repeat(65) }, 'Transition.rewardSource'],
    ['reward source with a space', { rewardSource: 'human review' }, 'Transition.rewardSource'],
    ['empty subject', { subjectId: '' }, 'Transition.subjectId'],
  ];

  it('accepts the sample', () => {
    expect(() => validateTransition(base)).not.toThrow();
  });

  it.each(cases)('refuses %s, naming %s', (_name, patch, field) => {
    expect(fieldOf(() => validateTransition({ ...base, ...patch }))).toBe(field);
  });
});

describe('validateEpisodeOutcome', () => {
  const base = sampleEvents(0).EpisodeOutcome;
  const cases: [string, Partial<EpisodeOutcome>, string][] = [
    ['NaN reward', { outcomeReward: NaN }, 'EpisodeOutcome.outcomeReward'],
    ['infinite reward', { outcomeReward: Infinity }, 'EpisodeOutcome.outcomeReward'],
    ['negative turns', { turns: -3 }, 'EpisodeOutcome.turns'],
    ['missing episode id', { episodeId: '' }, 'EpisodeOutcome.episodeId'],
    ['negative time', { eventTimeMs: -5 }, 'EpisodeOutcome.eventTimeMs'],
    ['negative revision', { revision: -1 }, 'EpisodeOutcome.revision'],
    ['fractional revision', { revision: 1.5 }, 'EpisodeOutcome.revision'],
    ['65-character reward source', { rewardSource: 'j'.repeat(65) }, 'EpisodeOutcome.rewardSource'],
    ['10,000-character subject', { subjectId: 'u'.repeat(10_000) }, 'EpisodeOutcome.subjectId'],
  ];

  it('accepts the sample', () => {
    expect(() => validateEpisodeOutcome(base)).not.toThrow();
  });

  it.each(cases)('refuses %s, naming %s', (_name, patch, field) => {
    expect(fieldOf(() => validateEpisodeOutcome({ ...base, ...patch }))).toBe(field);
  });
});
