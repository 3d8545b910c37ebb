import { EventCodec, RawRecord } from '@srpo/events';

const codec = new EventCodec();

/** A Transition record of episode `e` on `topic` at `offset` with event time `t` (for the runtime's specs). */
export function transitionRecord(topic: string, offset: number, t: number, reward: number | null = null): RawRecord {
  const value = codec.encode('Transition', {
    transitionId: `${topic}-${offset}`,
    episodeId: 'e',
    step: 0,
    preStateId: 's',
    taskId: 'task',
    position: 'p',
    consumedOutputIds: [],
    expectedCardinality: 0,
    workflowKind: 'JOINT',
    routing: null,
    groupKey: null,
    expectedGroupSize: null,
    observationDigest: 'd',
    reward,
    done: true,
    eventTimeMs: t,
  });
  return { topic, partition: 0, offset, key: Buffer.from('e'), value, timestampMs: 0 };
}
