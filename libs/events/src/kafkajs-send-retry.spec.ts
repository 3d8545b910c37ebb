/**
 * The kafkajs fix applied at install (patches/kafkajs+2.2.4.patch, kafkajs#1303): a retried send
 * must write every partition once, even when a partition's leader moved to a broker that already
 * answered for other partitions. Unpatched, kafkajs kept one response per broker across retries,
 * skipped that broker on the retry and resolved without writing the moved partition: found by
 * test/cluster-fault.int-spec.ts (a leader SIGKILLed mid-batch lost three AgentOutputs).
 *
 * kafkajs's own `sendMessages` with a scripted cluster: the leaders, the brokers' answers and the
 * retries are the test's; everything under test is kafkajs's code as installed.
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const createSendMessages = require('kafkajs/src/producer/sendMessages') as (deps: unknown) => (args: unknown) => Promise<SentPartition[]>;

interface SentPartition {
  topicName: string;
  partition: number;
  errorCode: number;
  baseOffset: string;
}

interface ProduceArgs {
  topicData: { topic: string; partitions: { partition: number; messages: { key: string }[] }[] }[];
}

function scriptedCluster(leaders: Record<string, number[]>) {
  const written: { broker: number; topic: string; partition: number; keys: string[] }[] = [];
  const failOnce = new Set<number>();
  const brokers = new Map<number, { nodeId: number; produce: (a: ProduceArgs) => Promise<unknown> }>();
  for (const nodeId of [1, 2, 3]) {
    brokers.set(nodeId, {
      nodeId,
      produce: async ({ topicData }: ProduceArgs) => {
        if (failOnce.delete(nodeId)) {
          // The leader dies: its partitions move to broker 1 before the retry.
          for (const t of Object.keys(leaders)) leaders[t] = leaders[t].map((l) => (l === nodeId ? 1 : l));
          throw Object.assign(new Error(`connection to broker ${nodeId} closed`), { name: 'KafkaJSConnectionError', retriable: true });
        }
        for (const t of topicData)
          for (const p of t.partitions) written.push({ broker: nodeId, topic: t.topic, partition: p.partition, keys: p.messages.map((m) => m.key) });
        return {
          topics: topicData.map((t) => ({
            topicName: t.topic,
            partitions: t.partitions.map((p) => ({
              partition: p.partition,
              errorCode: 0,
              baseOffset: String(written.length),
              logAppendTime: '-1',
              logStartOffset: '0',
            })),
          })),
        };
      },
    });
  }
  const cluster = {
    refreshMetadataIfNecessary: async () => undefined,
    refreshMetadata: async () => undefined,
    addMultipleTargetTopics: async () => undefined,
    isConnected: () => true,
    removeBroker: () => undefined,
    targetTopics: new Set<string>(),
    findTopicPartitionMetadata: (topic: string) => leaders[topic].map((leader, partitionId) => ({ partitionId, leader })),
    findLeaderForPartitions: (topic: string, partitions: string[]) => {
      const out: Record<string, number[]> = {};
      for (const p of partitions) (out[String(leaders[topic][Number(p)])] ??= []).push(Number(p));
      return out;
    },
    findBroker: async ({ nodeId }: { nodeId: string }) => brokers.get(Number(nodeId)),
  };
  const sequences = new Map<string, number>();
  const eosManager = {
    acquireBrokerLock: async () => undefined,
    releaseBrokerLock: async () => undefined,
    isTransactional: () => false,
    getSequence: (t: string, p: number) => sequences.get(`${t}/${p}`) ?? 0,
    updateSequence: (t: string, p: number, n: number) => sequences.set(`${t}/${p}`, (sequences.get(`${t}/${p}`) ?? 0) + n),
    getProducerId: () => 1,
    getProducerEpoch: () => 0,
    getTransactionalId: () => undefined,
  };
  const retrier = async (fn: (bail: (e: Error) => never, retryCount: number, retryTime: number) => Promise<SentPartition[]>) => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn(
          (e) => {
            throw e;
          },
          attempt,
          0,
        );
      } catch (e) {
        if (attempt >= 5 || !(e as { retriable?: boolean }).retriable) throw e;
      }
    }
  };
  const logger = { error: () => undefined, debug: () => undefined, info: () => undefined, warn: () => undefined };
  // Messages carry their partition in the key: the partitioner is the test's.
  const partitioner = ({ message }: { message: { key: string } }) => Number(message.key.split(':')[1]);
  const send = createSendMessages({ logger, cluster, partitioner, eosManager, retrier });
  return { send, written, failOnce, sequences };
}

describe('kafkajs send retries (patched at install)', () => {
  it('writes a partition whose leader moved to a broker that had already answered, once, with the sequence it first had', async () => {
    // outputs-0 on broker 3, transitions-0 on broker 1; broker 3 dies during the first attempt.
    const c = scriptedCluster({ outputs: [3, 2], transitions: [1, 2] });
    c.failOnce.add(3);
    const sent = await c.send({
      acks: -1,
      timeout: 30_000,
      compression: 0,
      topicMessages: [
        { topic: 'outputs', messages: [{ key: 'c80:0' }, { key: 'c81:0' }, { key: 'c83:1' }] },
        { topic: 'transitions', messages: [{ key: 'c80:0' }, { key: 'c81:0' }, { key: 'c83:1' }] },
      ],
    });
    const writes = c.written.map((w) => `${w.topic}-${w.partition}@${w.broker}:${w.keys.join(',')}`).sort();
    expect(writes).toEqual(['outputs-0@1:c80:0,c81:0', 'outputs-1@2:c83:1', 'transitions-0@1:c80:0,c81:0', 'transitions-1@2:c83:1']);
    expect(sent.map((s) => `${s.topicName}-${s.partition}`).sort()).toEqual(['outputs-0', 'outputs-1', 'transitions-0', 'transitions-1']);
    // Each partition's sequence moved by its messages once (the failed attempt's rolled back).
    expect(Object.fromEntries(c.sequences)).toEqual({ 'outputs/0': 2, 'outputs/1': 1, 'transitions/0': 2, 'transitions/1': 1 });
  });
});
