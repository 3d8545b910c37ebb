import { AgentEvent, AgentEventsProducer, createKafka, ensureTopics, EventCodec, readTopicsToEnd, SchemaRegistryClient, topicCatalog } from '@srpo/events';
import { DEFAULT_OBJECTIVE_CONFIG } from '@srpo/srpo';
import { ensureKafka, output, startFakeSchemaRegistry, transition, uniquePrefix } from '@srpo/testing';
import { rematerialize, type RematerializeSettings } from '@srpo/materializer';

const SETTINGS: RematerializeSettings = {
  setTtlMs: 60_000,
  groupTtlMs: 120_000,
  dedupeRetentionMs: 600_000,
  maxBrokerSkewMs: 10_000,
  maxLatenessMs: 86_400_000,
  objective: DEFAULT_OBJECTIVE_CONFIG,
};

/** Two one-output episodes of one declared group of size 2, rewards 1 and 0. */
function events(): AgentEvent[] {
  const out: AgentEvent[] = [];
  ['r0', 'r1'].forEach((id, i) => {
    const t = 1_767_225_600_000 + i;
    out.push({ type: 'AgentOutput', value: output(id, 0, { eventTimeMs: t, startedAtMs: t }) });
    out.push({ type: 'Transition', value: transition(id, [0], { groupKey: 'task-r', expectedGroupSize: 2, reward: 1 - i, eventTimeMs: t }) });
  });
  return out;
}

/**
 * Re-materialization of raw events that agents wrote in the Confluent wire format (schema
 * registry): with the registry it derives the same group a live materializer would; without
 * it every raw event is dead-lettered as UNKNOWN_SCHEMA and nothing is derived.
 */
describe('re-materialization of Confluent-framed raw events (real broker)', () => {
  const kafka = createKafka({ brokers: ensureKafka(), clientId: 'remat-registry-test' });

  it('decodes them with SRPO_SCHEMA_REGISTRY_URL and dead-letters them without', async () => {
    const registry = await startFakeSchemaRegistry();
    try {
      const source = topicCatalog({ prefix: uniquePrefix('rematreg'), rawPartitions: 2, derivedPartitions: 1 });
      const admin = kafka.admin();
      await admin.connect();
      await ensureTopics(admin, source.all());
      await admin.disconnect();
      const writer = new EventCodec(undefined, { registry: new SchemaRegistryClient({ url: registry.url }) });
      await writer.useRegistry();
      const sdk = new AgentEventsProducer({ kafka, codec: writer, topics: source });
      await sdk.emitBatch(events());
      await sdk.disconnect();
      const raw = await readTopicsToEnd(kafka, [source.agentOutputs.name, source.transitions.name]);
      expect(raw).toHaveLength(4);
      for (const r of raw) expect(r.value?.[0]).toBe(0); // Confluent magic byte, not C3 01

      const blind = await rematerialize({ kafka, source, targetPrefix: uniquePrefix('rematreg-blind'), settings: SETTINGS, codec: new EventCodec() });
      expect(blind.deadLetters).toBe(4);
      expect(blind.groups.size).toBe(0);

      const reader = new EventCodec(undefined, { registry: new SchemaRegistryClient({ url: registry.url }) });
      const result = await rematerialize({ kafka, source, targetPrefix: uniquePrefix('rematreg-seen'), settings: SETTINGS, codec: reader });
      expect(result.deadLetters).toBe(0);
      expect(result.setsComplete).toBe(2);
      expect(result.groups.size).toBe(1);
      const [{ group }] = [...result.groups.values()];
      // Rewards 1 and 0: mean 0.5, sample std √0.5 ≈ 0.707107, so A = ±0.5 / (0.707107 + 1e-6) = ±0.707106.
      const advantages = Object.fromEntries(group.sets.map((s) => [s.set.setId, s.advantage]));
      expect(advantages['r0/t0']).toBeCloseTo(0.707106, 5);
      expect(advantages['r1/t0']).toBeCloseTo(-0.707106, 5);
      // The run's own outputs are framed with the registry's ids, as the live materializer's are.
      const written = await readTopicsToEnd(kafka, [result.target.advantageGroups.name]);
      expect(written.map((r) => r.value?.[0])).toEqual([0]);
    } finally {
      await new Promise<void>((resolve) => registry.server.close(() => resolve()));
    }
  });
});
