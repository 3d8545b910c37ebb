import { transition } from '@srpo/testing';
import { EpisodeAssembler } from './episode-assembler';
import type { JudgedText } from './judge-input';

const text = (episodeId: string, n: number, step: number): JudgedText => ({
  outputId: `${episodeId}/o${n}`,
  step,
  role: 'r',
  agentId: 'a',
  policyId: 'actor',
  policyVersion: 1,
  prompt: 'p',
  response: `step ${step}`,
});

describe('EpisodeAssembler', () => {
  const limits = { maxEpisodes: 10, ttlMs: 1_000 };

  it('is ready at the done transition once every listed output came, outputs in step order', () => {
    const a = new EpisodeAssembler(limits);
    a.addOutput(0, 'e1', 'e1/o1', 1000, text('e1', 1, 1));
    a.addTransition(0, transition('e1', [0], { step: 0, done: false }));
    a.addTransition(1, transition('e1', [1], { transitionId: 'e1/t1', step: 1, done: true, taskId: 'task-9' }));
    expect(a.takeReady()).toEqual([]); // e1/o0 is listed but not read yet
    a.addOutput(1, 'e1', 'e1/o0', 1000, text('e1', 0, 0));
    const [ready] = a.takeReady();
    expect(ready.episodeId).toBe('e1');
    expect(ready.done.taskId).toBe('task-9');
    expect(ready.outputs.map((o) => o.step)).toEqual([0, 1]);
    expect(a.size).toBe(0);
  });

  it("counts other policies' outputs for completeness without holding their text", () => {
    const a = new EpisodeAssembler(limits);
    a.addOutput(0, 'e1', 'e1/o0', 1000, null);
    a.addOutput(1, 'e1', 'e1/o1', 1000, text('e1', 1, 0));
    a.addTransition(0, transition('e1', [0, 1]));
    expect(a.takeReady()[0].outputs.map((o) => o.outputId)).toEqual(['e1/o1']);
  });

  it('commits no further than the first record a held episode needs', () => {
    const a = new EpisodeAssembler(limits);
    expect(a.safeOffsets()).toEqual({});
    a.addOutput(5, 'e1', 'e1/o0', 1000, text('e1', 0, 0));
    a.addOutput(6, 'e2', 'e2/o0', 1000, text('e2', 0, 0));
    a.addTransition(3, transition('e2', [0]));
    expect(a.safeOffsets()).toEqual({ outputs: 5, transitions: 3 }); // e2's done transition waits for nothing, but is not taken yet
    a.takeReady();
    expect(a.safeOffsets()).toEqual({ outputs: 5, transitions: 4 });
    a.addTransition(4, transition('e1', [0]));
    a.takeReady();
    expect(a.safeOffsets()).toEqual({ outputs: 7, transitions: 5 });
  });

  it('drops the episode read first when full, and episodes idle past the TTL in event time', () => {
    const a = new EpisodeAssembler({ maxEpisodes: 2, ttlMs: 1_000 });
    a.addOutput(0, 'e1', 'e1/o0', 1000, null);
    a.addOutput(1, 'e2', 'e2/o0', 1500, null);
    expect(a.addOutput(2, 'e3', 'e3/o0', 1600, null)).toEqual([{ episodeId: 'e1', reason: 'pending_full' }]);
    expect(a.expire()).toEqual([]);
    a.addOutput(3, 'e3', 'e3/o1', 2600, null);
    expect(a.expire()).toEqual([{ episodeId: 'e2', reason: 'expired' }]);
    expect(a.size).toBe(1);
  });

  it('reads a duplicate output once', () => {
    const a = new EpisodeAssembler(limits);
    a.addOutput(0, 'e1', 'e1/o0', 1000, text('e1', 0, 0));
    a.addOutput(1, 'e1', 'e1/o0', 1000, text('e1', 0, 0));
    a.addTransition(0, transition('e1', [0]));
    expect(a.takeReady()[0].outputs).toHaveLength(1);
  });
});
