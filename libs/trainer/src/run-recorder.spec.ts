import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ErrorCode, Logger } from '@srpo/core';
import { resolveObjectiveConfig } from '@srpo/srpo';
import { AuditStore, ledgerEntryFromGroup } from '@srpo/store';
import { activeSet, advantageGroup, member } from '@srpo/testing';
import { InMemoryEventsPublisher } from './events-publisher';
import { RunRecorder, runLocation, type UpdateRecordFields } from './run-recorder';
import { readUpdateHyperparameters } from './update-hyperparameters';

Logger.configure({ level: 'warn' });

const HASH_0 = '0'.repeat(64);
const HASH_1 = '1'.repeat(64);
const T0 = 1_767_225_600_000;

const fields = (over: Partial<UpdateRecordFields> = {}): UpdateRecordFields => ({
  updateId: 'solver.v1.abc',
  policyId: 'solver',
  versionBefore: 0,
  weightsHashBefore: HASH_0,
  weightsHashAfter: HASH_1,
  hyperparameters: {
    objective: resolveObjectiveConfig({}, 'objective'),
    lr: 0.01,
    epochs: 1,
    maxGradNorm: 1,
    microBatchTokens: 0,
    maxPolicyLag: 4,
    setsPerUpdate: 16,
    temperature: 1,
  },
  seed: 7,
  result: { loss: 0.5, gradNorm: 2, diagnostics: { 'losses/clip_frac_low': 0 } },
  wallTimeMs: 3,
  checkpointUri: 'file:///ckpt/solver/v1',
  committedAtMs: T0 + 1,
  ...over,
});

describe('RunRecorder', () => {
  let dir: string;
  let store: AuditStore;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-run-recorder-'));
    store = await AuditStore.open({ kind: 'sqlite', path: path.join(dir, 'store.sqlite') });
  });

  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('builds the stored record: next version, its backend, the default or the given code version', () => {
    const recorder = new RunRecorder({ store, backend: 'tensorflow', codeVersion: 'srpo-kafka@1' });
    const r = recorder.updateRecord(fields());
    expect(r).toMatchObject({
      versionBefore: 0,
      versionAfter: 1,
      backend: 'tensorflow',
      codeVersion: 'srpo-kafka@1',
      loss: 0.5,
      gradNorm: 2,
      diagnostics: { 'losses/clip_frac_low': 0 },
    });
    expect(Object.keys(r.hyperparameters)).toEqual([
      'objective',
      'lr',
      'epochs',
      'maxGradNorm',
      'microBatchTokens',
      'maxPolicyLag',
      'setsPerUpdate',
      'temperature',
    ]);
    expect(recorder.updateRecord(fields({ codeVersion: 'original@0' })).codeVersion).toBe('original@0');
    expect(() => new RunRecorder({ store, backend: 'cpu' }).updateRecord(fields())).toThrow(/codeVersion: update solver\.v1\.abc names no code version/);
  });

  it('records an update that reads back typed, and publishes its events', async () => {
    const publisher = new InMemoryEventsPublisher();
    const recorder = new RunRecorder({ store, backend: 'cpu', codeVersion: 'test', publisher });
    await recorder.registerPolicy('solver', { version: 0, weightsHash: HASH_0, checkpointUri: 'file:///ckpt/solver/v0', createdAtMs: T0 });
    const g = advantageGroup('g1', [{ set: activeSet('g1/a', [member({ outputId: 'o1', logpOld: [-1, -1, -1] })]), advantage: 1 }]);
    const detail = await recorder.recordUpdate(fields(), [ledgerEntryFromGroup(g, { topic: 'srpo.advantage-groups', partition: 0, offset: 5 })]);
    expect(readUpdateHyperparameters(await store.getUpdate(detail.updateId))).toEqual(fields().hyperparameters);
    await recorder.publish(detail);
    await recorder.publish(detail, 'agentbrew-best_prefix');
    expect(published(publisher)).toEqual([
      ['solver.v1.abc', 'srpo', 1],
      ['solver.v1.abc', 'agentbrew-best_prefix', 1],
    ]);
    await expect(new RunRecorder({ store, backend: 'cpu' }).publish(detail)).rejects.toMatchObject({ code: ErrorCode.CONFLICT });
  });
});

describe('runLocation', () => {
  it('checks the name and refuses a run that exists, before anything is written', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-run-location-'));
    try {
      const l = runLocation(root, 'r1');
      expect(l).toMatchObject({ run: 'r1', dir: path.join(root, 'r1'), storePath: path.join(root, 'r1', 'store.sqlite') });
      expect(l.checkpoints.dirFor('solver', 3)).toBe(path.join(root, 'r1', 'checkpoints', 'solver', 'v3'));
      expect(fs.existsSync(l.dir)).toBe(false);
      for (const bad of ['', '..', 'a/b', 'x y']) expect(() => runLocation(root, bad)).toThrow(/^run: must match \[A-Za-z0-9._-\]\+/);
      fs.mkdirSync(l.dir);
      fs.writeFileSync(l.storePath, '');
      expect(() => runLocation(root, 'r1')).toThrow(
        expect.objectContaining({ code: ErrorCode.CONFLICT, message: expect.stringMatching(/^run r1 already exists in /) }),
      );
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

function published(p: InMemoryEventsPublisher): [string, string, number][] {
  return p.published.map((e) => [e.update.updateId, e.update.objective, e.version.version]);
}
