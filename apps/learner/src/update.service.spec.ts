import * as fs from 'fs';
import { initTfBackend, Logger } from '@srpo/core';
import { backendLabel } from '@srpo/kernels';
import { AuditStore, eventsFor } from '@srpo/store';
import { InMemoryEventsPublisher, LearnerMetrics, TfPolicyTrainer } from '@srpo/trainer';
import { SEED, simpleGroup, tempDir, TINY_MODEL_JSON } from '@srpo/testing';
import { FaultInjector } from './fault-injection';
import { loadLearnerConfig } from './learner-config';
import { LearnerStateService } from './learner-state.service';
import { UpdateService } from './update.service';

Logger.configure({ level: 'error' });

const NOW = 1_767_225_700_000;

/*
 * The wiring only: UpdateService builds @srpo/trainer's UpdateCycle from the learner's config
 * and services (the cycle's own behaviour is libs/trainer/src/update-cycle.spec.ts).
 */
describe('UpdateService', () => {
  let dir: string;

  beforeAll(async () => {
    await initTfBackend('tensorflow');
  });

  beforeEach(() => {
    dir = tempDir('update-service');
  });

  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('applies batches with the configured settings and backend, and re-sends the committed update after a restart', async () => {
    const env = {
      SRPO_POLICY_ID: 'solver',
      SRPO_SQLITE_PATH: 'learner.sqlite',
      SRPO_CHECKPOINT_DIR: 'checkpoints',
      SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
      SRPO_SEED: String(SEED),
      SRPO_LR: '0.01',
      SRPO_MAX_POLICY_LAG: '3',
      SRPO_SETS_PER_UPDATE: '5',
      SRPO_CODE_VERSION: 'wired-code',
    };
    const start = async () => {
      const config = loadLearnerConfig(env, dir);
      const store = await AuditStore.open(config.store);
      const trainer = new TfPolicyTrainer({
        policyId: config.policyId,
        model: config.model,
        lr: config.lr,
        epochs: config.epochs,
        maxGradNorm: config.maxGradNorm,
      });
      const metrics = new LearnerMetrics();
      const state = new LearnerStateService(config, store, trainer, () => NOW, metrics);
      const publisher = new InMemoryEventsPublisher();
      const updates = new UpdateService(config, store, trainer, publisher, () => NOW, new FaultInjector(undefined), { name: 'tensorflow' }, state, metrics);
      await state.restore();
      const close = async () => {
        trainer.dispose();
        await store.close();
      };
      return { store, publisher, updates, close };
    };

    const first = await start();
    const outcome = await first.updates.applyBatch([simpleGroup('g1')]);
    expect(outcome.update).toMatchObject({
      policyId: 'solver',
      versionAfter: 1,
      seed: SEED,
      codeVersion: 'wired-code',
      backend: backendLabel({ name: 'tensorflow' }),
      hyperparameters: { lr: 0.01, maxPolicyLag: 3, setsPerUpdate: 5, temperature: 1 },
    });
    expect(first.updates.pendingPublications()).toBe(0);
    await first.close();

    const second = await start();
    await second.updates.republishLatest();
    expect(second.publisher.published).toEqual([eventsFor(await second.store.getUpdate(outcome.update?.updateId ?? ''))]);
    await second.close();
  });
});
