import { AssignerProtocol, PartitionAssigner } from 'kafkajs';

/**
 * Partition p of every subscribed topic goes to the same member, as Kafka Streams assigns
 * co-partitioned inputs: a materializer task joins outputs, transitions and outcomes of one
 * episode, so they must be read by one process. Members sorted by id take partitions in
 * turn. Pure: both clients' assigners call it.
 */
export function coPartitionAssignment(
  memberIds: readonly string[],
  partitionsOf: ReadonlyMap<string, readonly number[]>,
): Map<string, Record<string, number[]>> {
  const sortedMembers = [...memberIds].sort();
  let maxPartitions = 0;
  for (const ids of partitionsOf.values()) maxPartitions = Math.max(maxPartitions, ids.length === 0 ? 0 : Math.max(...ids) + 1);
  const assignment = new Map<string, Record<string, number[]>>(sortedMembers.map((m) => [m, {}]));
  if (sortedMembers.length === 0) return assignment;
  for (let p = 0; p < maxPartitions; p++) {
    const owner = assignment.get(sortedMembers[p % sortedMembers.length]) as Record<string, number[]>;
    for (const [topic, ids] of partitionsOf) if (ids.includes(p)) (owner[topic] ??= []).push(p);
  }
  return assignment;
}

/** {@link coPartitionAssignment} as a kafkajs assigner (kafkajs's default round-robin would split the inputs). */
export const CoPartitionAssigner: PartitionAssigner = ({ cluster }) => ({
  name: 'SrpoCoPartitionAssigner',
  version: 1,
  async assign({ members, topics }) {
    const partitionsOf = new Map<string, number[]>();
    for (const topic of topics)
      partitionsOf.set(
        topic,
        cluster.findTopicPartitionMetadata(topic).map((m) => m.partitionId),
      );
    return [
      ...coPartitionAssignment(
        members.map((m) => m.memberId),
        partitionsOf,
      ),
    ].map(([memberId, a]) => ({
      memberId,
      memberAssignment: AssignerProtocol.MemberAssignment.encode({ version: 1, assignment: a, userData: Buffer.alloc(0) }),
    }));
  },
  protocol({ topics }) {
    return {
      name: 'SrpoCoPartitionAssigner',
      metadata: AssignerProtocol.MemberMetadata.encode({ version: 1, topics, userData: Buffer.alloc(0) }),
    };
  },
});
