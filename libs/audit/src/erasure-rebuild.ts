import { createHash } from 'crypto';
import * as path from 'path';
import type { Kafka } from 'kafkajs';
import { ErrorCode, SrpoError } from '@srpo/core';
import type { ContentKeySource, EventCodec } from '@srpo/events';
import { AuditStore } from '@srpo/store';
import { AuditService } from './audit.service';
import { holds, type ErasureImpact } from './erasure-impact';
import { ReplayService, type ReplayReport } from './replay.service';

/** A policy lineage rebuilt without erased data, and what was checked of it. */
export interface RebuiltLineage {
  policyId: string;
  /** The replay run that holds it (`<runDir>/<run>/`: its store and checkpoints). */
  run: string;
  runDir: string;
  /** The last version the erased data never reached: the lineage starts from it. */
  fromVersion: number;
  replay: ReplayReport;
  /** The rebuilt lineage's last version. */
  head: { version: number; weightsHash: string; checkpointUri: string };
  /** SHA-256 over the lineage's versions, `version:weightsHash` per line from `fromVersion` on. */
  lineageHash: string;
  /** Updates of the rebuilt lineage that `audit verify` recomputed bit for bit (all of them, or the rebuild fails). */
  verified: number;
  /** Sets of the rebuilt lineage's ledger that hold the erased data: none, or the rebuild fails. */
  citesErased: string[];
}

export interface RebuildDeps {
  store: AuditStore;
  kafka: Kafka;
  backend: string;
  codec: EventCodec;
  keys: ContentKeySource;
  checkpointDir?: string;
}

/**
 * `srpo erase --rebuild`: replays `policyId`'s lineage from the last version the erased data
 * never reached, with the erased sets left out and their groups renormalized (the replay does it
 * once their keys are gone), into run `run`; then checks the new lineage: every update recomputes
 * bit for bit from its own record (`audit verify` over the run's store, with the content keys of
 * the source store), and no set of its ledger holds the erased data.
 *
 * @throws SrpoError NOT_FOUND when the data reached no update of the policy; INTEGRITY_FAILED when
 *   a check of the new lineage fails.
 */
export async function rebuildWithout(
  deps: RebuildDeps,
  impact: ErasureImpact,
  options: { policyId: string; run: string; runDir: string; topicPrefix: string },
): Promise<RebuiltLineage> {
  const { policyId } = options;
  const first = impact.updates.find((u) => u.policyId === policyId);
  const clean = impact.cleanBefore.find((c) => c.policyId === policyId);
  if (!first || !clean) throw new SrpoError(ErrorCode.NOT_FOUND, `the erased data reached no update of ${policyId}: nothing to rebuild`, { field: 'policy' });
  const replay = await new ReplayService(deps).replay({
    run: options.run,
    runDir: options.runDir,
    policyId,
    from: first.committedAtMs,
    topicPrefix: options.topicPrefix,
  });
  if (!replay.complete) {
    throw new SrpoError(
      ErrorCode.INTEGRITY_FAILED,
      `the rebuild stopped at ${replay.firstDivergence?.updateId}: ${replay.firstDivergence?.detail ?? 'incomplete'}`,
    );
  }
  const runStore = await AuditStore.open({ kind: 'sqlite', path: path.join(options.runDir, options.run, 'store.sqlite') });
  try {
    const audit = new AuditService({ store: runStore, kafka: deps.kafka, backend: deps.backend, codec: deps.codec, keys: deps.keys });
    const versions = (await runStore.listVersions(policyId)).filter((v) => v.version >= clean.version);
    const out: RebuiltLineage = {
      policyId,
      run: options.run,
      runDir: options.runDir,
      fromVersion: clean.version,
      replay,
      head: { version: 0, weightsHash: '', checkpointUri: '' },
      lineageHash: createHash('sha256')
        .update(versions.map((v) => `${v.version}:${v.weightsHash}`).join('\n'))
        .digest('hex'),
      verified: 0,
      citesErased: [],
    };
    for (const v of versions) {
      out.head = { version: v.version, weightsHash: v.weightsHash, checkpointUri: v.checkpointUri };
      if (v.updateId === null) continue;
      const update = await runStore.getUpdate(v.updateId);
      for (const g of await audit.fetchGroups(update.groups))
        out.citesErased.push(...g.sets.filter((gs) => holds(impact.scope, gs.set)).map((gs) => gs.set.setId));
      const report = await audit.verify(v.updateId);
      if (!report.ok) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `rebuilt update ${v.updateId} does not verify: ${report.failure ?? 'unknown'}`);
      out.verified++;
    }
    if (out.citesErased.length > 0)
      throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `the rebuilt lineage still cites erased sets: ${out.citesErased.join(', ')}`);
    return out;
  } finally {
    await runStore.close();
  }
}
