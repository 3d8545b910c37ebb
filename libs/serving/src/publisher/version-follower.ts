import { randomUUID } from 'crypto';
import type { Consumer, Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, Logger, SrpoError } from '@srpo/core';
import { EventCodec, readTopicsToEnd, type PolicyVersion, type TopicCatalog } from '@srpo/events';

export interface VersionFollowerOptions {
  kafka: Kafka;
  catalog: TopicCatalog;
  codec?: EventCodec;
  /** Policies followed; empty: every policy. */
  policies: readonly string[];
  /** Told of each announcement, in topic order (the newest of the history first). */
  onVersion: (v: PolicyVersion) => void;
  logger?: Logger;
}

/**
 * Follows the policy-versions topic as the policy pool does: the history is read to its end and
 * only each policy's newest version is handed on (a publisher started late does not replay
 * every old version), then a consumer of its own group follows new announcements. Returns a
 * stop function.
 */
export async function followPolicyVersions(o: VersionFollowerOptions): Promise<{ stop: () => Promise<void> }> {
  const log = o.logger ?? new Logger('version-follower');
  const codec = o.codec ?? new EventCodec();
  const topic = o.catalog.policyVersions.name;
  const wanted = (id: string) => o.policies.length === 0 || o.policies.includes(id);
  let history;
  try {
    history = await readTopicsToEnd(o.kafka, [topic]);
  } catch (e) {
    throw new SrpoError(ErrorCode.UNAVAILABLE, `cannot read ${topic} (${errorMessage(e)}); is the broker up and the topic catalog created?`, { cause: e });
  }
  const newest = new Map<string, PolicyVersion>();
  for (const r of history) {
    const v = codec.decodeAs('PolicyVersion', r.value);
    if (wanted(v.policyId) && (newest.get(v.policyId)?.version ?? -1) < v.version) newest.set(v.policyId, v);
  }
  for (const v of newest.values()) o.onVersion(v);
  const consumer: Consumer = o.kafka.consumer({ groupId: `srpo-publisher-${randomUUID()}`, maxWaitTimeInMs: 100, readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      const v = codec.decodeAs('PolicyVersion', message.value);
      if (wanted(v.policyId)) o.onVersion(v);
      return Promise.resolve();
    },
  });
  log.info('following policy versions', {
    topic,
    policies: o.policies.length > 0 ? o.policies : 'all',
    newest: Object.fromEntries([...newest].map(([k, v]) => [k, v.version])),
  });
  return { stop: () => consumer.disconnect().catch((e: unknown) => log.warn('version consumer disconnect failed', { error: errorMessage(e) })) };
}

/** The announcement of `policyId` version `version` on policy-versions (the topic is read to its end), or undefined. */
export async function findPolicyVersion(
  kafka: Kafka,
  catalog: TopicCatalog,
  policyId: string,
  version: number,
  codec = new EventCodec(),
): Promise<PolicyVersion | undefined> {
  const topic = catalog.policyVersions.name;
  let history;
  try {
    history = await readTopicsToEnd(kafka, [topic]);
  } catch (e) {
    throw new SrpoError(ErrorCode.UNAVAILABLE, `cannot read ${topic} (${errorMessage(e)}); is the broker up?`, { cause: e, retriable: true });
  }
  return history.map((r) => codec.decodeAs('PolicyVersion', r.value)).find((v) => v.policyId === policyId && v.version === version);
}
