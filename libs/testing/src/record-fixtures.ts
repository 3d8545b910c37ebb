import { EventCodec, RawRecord } from '@srpo/events';

const codec = new EventCodec();

/** A Transition's Avro value with id `transitionId` (episode `e`, done), for the runtime's specs. */
export function transitionValue(transitionId: string, eventTimeMs = 0, reward: number | null = null): Buffer {
  return codec.encode('Transition', {
    transitionId,
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
    eventTimeMs,
    rewardSource: null,
    subjectId: null,
  });
}

/** A Transition record of episode `e` on `topic` at `offset` with event time `t` (for the runtime's specs). */
export function transitionRecord(topic: string, offset: number, t: number, reward: number | null = null): RawRecord {
  return { topic, partition: 0, offset, key: Buffer.from('e'), value: transitionValue(`${topic}-${offset}`, t, reward), timestampMs: 0 };
}
