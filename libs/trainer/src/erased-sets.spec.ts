import * as fs from 'fs';
import * as path from 'path';
import { initTfBackend, Logger } from '@srpo/core';
import { backendLabel } from '@srpo/kernels';
import type { ContentKey } from '@srpo/events';
import { resolveObjectiveConfig } from '@srpo/srpo';
import { AuditStore, KeyStore } from '@srpo/store';
import { activeSet, advantageGroup, member, ready, SEED, tempDir, TINY_MODEL } from '@srpo/testing';
import { CommittedPolicyState } from './committed-policy-state';
import { InMemoryEventsPublisher } from './events-publisher';
import { LearnerMetrics } from './learner-metrics';
import { TfPolicyTrainer } from './policy-trainer';
import { UpdateCycle } from './update-cycle';
import type { ReadyGroup } from './update-cycle-ports';

Logger.configure({ level: 'error' });

const NOW = 1_767_225_700_000;

interface Learner {
  store: AuditStore;
  keys: KeyStore;
  updates: UpdateCycle;
  metrics: LearnerMetrics;
  close(): Promise<void>;
}

/** One learner over `dir`, reading content keys from its own store (as the learner app does). */
async function startLearner(dir: string): Promise<Learner> {
  await initTfBackend('tensorflow');
  const config = {
    policyId: 'solver',
    policyRoles: ['solver'],
    seed: SEED,
    checkpointDir: path.resolve(dir, 'checkpoints'),
    checkpointRetention: { keepLast: 20, keepEvery: 100 },
    maxPolicyLag: 4,
    objective: resolveObjectiveConfig({ objective: 'srpo' }),
    lr: 0.01,
    epochs: 1,
    maxGradNorm: 1,
    microBatchTokens: 0,
    setsPerUpdate: 16,
    codeVersion: 'test-code',
    backend: backendLabel({ name: 'tensorflow' }),
  };
  const store = await AuditStore.open({ kind: 'sqlite', path: path.resolve(dir, 'learner.sqlite') });
  const keys = new KeyStore(store.dataSource, { cacheMs: 0 });
  const trainer = new TfPolicyTrainer({ policyId: 'solver', model: TINY_MODEL, lr: config.lr, epochs: 1, maxGradNorm: 1 });
  const metrics = new LearnerMetrics();
  const state = new CommittedPolicyState(config, store, trainer, () => NOW, metrics);
  const faults = { reached: () => undefined };
  const updates = new UpdateCycle(config, { store, trainer, publisher: new InMemoryEventsPublisher(), clock: () => NOW, faults, state, metrics, keys });
  await state.restore();
  return {
    store,
    keys,
    updates,
    metrics,
    close: async () => {
      trainer.dispose();
      await store.close();
    },
  };
}

/** A group of sets with the given rewards; set i's single member is sealed under `seal[i]` when given. */
function group(groupId: string, rewards: number[], seal: (ContentKey | undefined)[] = [], advantages: number[] = []): ReadyGroup {
  const sets = rewards.map((reward, i) => {
    const m = member({
      outputId: `${groupId}/o${i}`,
      context: [1, 2, 3],
      response: [4 + i, 5, 6],
      logpOld: [-2.5, -2.75, -3],
      subjectId: `u${i}`,
      seal: seal[i],
    });
    return { set: { ...activeSet(`${groupId}/s${i}`, [m]), reward }, advantage: advantages[i] ?? 0 };
  });
  return ready(advantageGroup(groupId, sets));
}

async function counter(metrics: LearnerMetrics, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name);
  const v = (m?.values as { value: number; labels: Record<string, string> }[] | undefined)?.find((x) =>
    Object.entries(labels).every(([k, l]) => x.labels[k] === l),
  );
  return v?.value;
}

describe('UpdateCycle with sealed content and erasures (docs/erasure.md)', () => {
  const dirs: string[] = [];
  const learners: Learner[] = [];
  const learner = async (): Promise<Learner> => {
    const dir = tempDir('erased');
    dirs.push(dir);
    const l = await startLearner(dir);
    learners.push(l);
    return l;
  };

  afterEach(async () => {
    for (const l of learners.splice(0)) await l.close();
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('trains on sealed members exactly as on the same members in the clear', async () => {
    const clear = await learner();
    const sealed = await learner();
    const k0 = await sealed.keys.keyFor('u0', 'ep-g/o0', NOW);
    const k1 = await sealed.keys.keyFor('u1', 'ep-g/o1', NOW);
    const a = await clear.updates.applyBatch([group('g', [1, 0])]);
    const b = await sealed.updates.applyBatch([group('g', [1, 0], [k0, k1])]);
    expect(b.skipped).toEqual([]);
    expect(b.update?.loss).toBe(a.update?.loss);
    expect(b.update?.weightsHashAfter).toBe(a.update?.weightsHashAfter);
    expect(await counter(sealed.metrics, 'learner_sets_erased_total')).toBe(0);
  });

  it('leaves an erased set out, renormalizes its group over the rest, records the sets trained on, and trains as if the set never came', async () => {
    const erasing = await learner();
    const without = await learner();
    const k2 = await erasing.keys.keyFor('u2', 'ep-g/o2', NOW);
    await erasing.keys.erase({ subjectId: 'u2' }, 'er-1', NOW);
    const a = await erasing.updates.applyBatch([group('g', [1, 0, 0.5], [undefined, undefined, k2])]);
    // The same group as the materializer would have emitted it without set 2: rewards 1 and 0, A = ±0.5 / (sqrt(0.5) + 1e-6).
    const a0 = 0.5 / (Math.SQRT1_2 + 1e-6);
    const b = await without.updates.applyBatch([group('g', [1, 0], [], [a0, -a0])]);
    expect(a.skipped).toEqual([]);
    expect(a.update?.groups[0].setIds).toEqual(['g/s0', 'g/s1']);
    expect(a.update?.groups[0].advantages[0]).toBeCloseTo(0.5 / (Math.SQRT1_2 + 1e-6), 12);
    expect(a.update?.groups[0].advantages[1]).toBeCloseTo(-0.5 / (Math.SQRT1_2 + 1e-6), 12);
    expect(a.update?.weightsHashAfter).toBe(b.update?.weightsHashAfter);
    expect(await counter(erasing.metrics, 'learner_sets_erased_total')).toBe(1);
  });

  it('skips a group whose every set is erased as `erased`, and trains the group beside it', async () => {
    const l = await learner();
    const k0 = await l.keys.keyFor('u0', 'ep-gone/o0', NOW);
    await l.keys.erase({ episodeId: 'ep-gone/o0' }, 'er-2', NOW);
    const out = await l.updates.applyBatch([group('gone', [1], [k0]), group('kept', [1, 0])]);
    expect(out.skipped.map((s) => [s.groupId, s.reason])).toEqual([['gone', 'erased']]);
    expect(out.update?.groups.map((g) => g.groupId)).toEqual(['kept']);
    expect(await counter(l.metrics, 'learner_groups_skipped_total', { reason: 'erased' })).toBe(1);
  });
});
