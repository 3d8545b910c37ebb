import { AssignerProtocol, PartitionAssigner } from 'kafkajs';

/**
 * Assigns partition p of every subscribed topic to the same member, as Kafka
 * Streams does for co-partitioned inputs: a materializer task joins outputs,
 * transitions and outcomes of one episode, so they must be read by one process.
 * kafkajs's default round-robin assigner would split them.
 */
export const CoPartitionAssigner: PartitionAssigner = ({ cluster }) => ({
  name: 'SrpoCoPartitionAssigner',
  version: 1,
  async assign({ members, topics }) {
    const sortedMembers = members.map((m) => m.memberId).sort();
    const partitionsOf = new Map<string, number[]>();
    let maxPartitions = 0;
    for (const topic of topics) {
      const ids = cluster
        .findTopicPartitionMetadata(topic)
        .map((m) => m.partitionId)
        .sort((a, b) => a - b);
      partitionsOf.set(topic, ids);
      maxPartitions = Math.max(maxPartitions, ids.length);
    }
    const assignment = new Map<string, Record<string, number[]>>(sortedMembers.map((m) => [m, {}]));
    for (let p = 0; p < maxPartitions; p++) {
      const owner = assignment.get(sortedMembers[p % sortedMembers.length]);
      if (!owner) continue;
      for (const [topic, ids] of partitionsOf) {
        if (ids.includes(p)) (owner[topic] ??= []).push(p);
      }
    }
    return [...assignment].map(([memberId, a]) => ({
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
