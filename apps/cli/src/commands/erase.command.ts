import { randomBytes } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { Command } from 'commander';
import {
  adoptLineage,
  announceErasure,
  AuditService,
  checkErasureCertificate,
  erasureImpact,
  rebuildWithout,
  signErasureCertificate,
  type ErasureCertificate,
  type ErasureImpact,
  type RebuiltLineage,
} from '@srpo/audit';
import { ErrorCode, errorMessage, initTfBackend, SrpoError } from '@srpo/core';
import { createKafka, EventCodec, topicCatalog } from '@srpo/events';
import { backendLabel } from '@srpo/kernels';
import { AuditStore, eventsFor, KeyStore, type ErasureResult, type ErasureScope } from '@srpo/store';
import { KafkaLearnerEventsPublisher } from '@srpo/trainer';
import { CliConfig } from '../cli-config';

interface EraseOptions {
  subject?: string;
  episode?: string;
  policy?: string;
  dryRun: boolean;
  rebuild: boolean;
  certificate?: string;
  checkCertificate?: string;
  publicKey?: string;
  printPublicKey: boolean;
  announce?: string;
  adopt?: string;
  learnerGroup?: string;
  waitMs: string;
  json: boolean;
}

/**
 * `srpo erase`: crypto-shredding of a data subject's (or an episode's) content (docs/erasure.md).
 * It reports every set, update and policy version the data reached, then, unless `--dry-run`,
 * deletes the content keys and records the erasure; `--rebuild --policy` replays the policy's
 * lineage without the erased sets and checks it; a signed certificate states what was done.
 */
export function eraseCommand(config: () => CliConfig): Command {
  return new Command('erase')
    .description(
      "erase a data subject's or an episode's content by deleting its content keys, after reporting every update and policy version it reached " +
        '(store: SRPO_DATABASE_URL or SRPO_SQLITE_PATH; events: KAFKA_BROKERS)',
    )
    .option('--subject <id>', 'the data subject (the subjectId its events carry)')
    .option('--episode <id>', 'one episode')
    .option('--policy <id>', 'report on this policy only (default: every policy in the store); the policy --rebuild rebuilds')
    .option('--dry-run', 'report the impact and delete nothing', false)
    .option('--rebuild', "after the erasure, replay the policy's lineage without the erased sets into run erase-<id> and verify it", false)
    .option('--certificate <file>', 'where the signed certificate goes (default ./erasure-<id>.json)')
    .option('--check-certificate <file>', 'check a certificate: its signature, and its signer against --public-key or this store')
    .option('--public-key <file>', "with --check-certificate: the store's public key the auditor pinned (PEM)")
    .option('--print-public-key', "print the store's public signing key (PEM), for auditors to pin", false)
    .option('--announce <erasureId>', 'write a recorded erasure to the erasures topic again (after an erasure whose announcement failed)')
    .option('--adopt <erasureId>', "make the head of the lineage rebuilt for this erasure the policy's next version (with --policy; the learner stopped)")
    .option('--learner-group <id>', "with --adopt: the learner's consumer group, which must have no member (default srpo-learner.<policy>)")
    .option('--wait-ms <ms>', "with --adopt: how long to wait for a stopped learner's group membership to expire (its session timeout)", '60000')
    .option('--json', 'print the report as JSON', false)
    .action(async (opts: EraseOptions) => {
      const cfg = config();
      if (opts.checkCertificate !== undefined) return checkCertificate(cfg, opts.checkCertificate, opts.publicKey);
      if (opts.printPublicKey) return withKeys(cfg, async (keys) => void process.stdout.write((await keys.signingKey(Date.now())).publicKeyPem));
      if (opts.announce !== undefined) return announceRecorded(cfg, opts.announce);
      if (opts.adopt !== undefined) {
        if (opts.policy === undefined) throw new SrpoError(ErrorCode.VALIDATION_FAILED, '--adopt needs --policy ID', { field: 'policy' });
        const waitMs = Number(opts.waitMs);
        if (!Number.isSafeInteger(waitMs) || waitMs < 0 || waitMs > 3_600_000)
          throw new SrpoError(ErrorCode.VALIDATION_FAILED, `must be 0 to 3600000 ms, got ${opts.waitMs}`, { field: 'wait-ms' });
        return adopt(cfg, opts.adopt, opts.policy, opts.learnerGroup ?? `srpo-learner.${opts.policy}`, waitMs);
      }
      const scope = scopeOf(opts);
      if (opts.rebuild && (opts.dryRun || opts.policy === undefined)) {
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, '--rebuild needs --policy ID and cannot be a dry run', { field: 'rebuild' });
      }
      await erase(cfg, scope, opts);
    });
}

async function erase(cfg: CliConfig, scope: ErasureScope, opts: EraseOptions): Promise<void> {
  const store = await AuditStore.open(cfg.store);
  try {
    const keys = new KeyStore(store.dataSource, { cacheMs: 0 });
    const kafka = createKafka(cfg.kafka);
    const codec = new EventCodec(undefined, { registry: cfg.schemaRegistry });
    const audit = new AuditService({ store, kafka, backend: 'none', codec, keys });
    const impact = await erasureImpact({ store, audit, keys }, scope, opts.policy ? { policyId: opts.policy } : {});
    if (opts.dryRun) {
      process.stdout.write(opts.json ? JSON.stringify({ impact, erasure: null }, null, 2) + '\n' : formatImpact(impact, undefined, null, undefined));
      return;
    }
    const erasureId = `er-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
    const erased = await keys.erase(scope, erasureId, Date.now());
    // Materializers drop the erased content from their state once they read this (docs/erasure.md).
    await announceErasure(kafka, topicCatalog(cfg.topics).erasures, codec, erased.erasure);
    let rebuilt: RebuiltLineage | null = null;
    if (opts.rebuild && opts.policy !== undefined) {
      const backend = backendLabel(await initTfBackend(cfg.backend, cfg.backendSettings));
      const run = `erase-${erasureId}`;
      rebuilt = await rebuildWithout({ store, kafka, backend, codec, keys, checkpointDir: cfg.checkpointDir }, impact, {
        policyId: opts.policy,
        run,
        runDir: cfg.replayDir,
        topicPrefix: `${cfg.topics.prefix ?? 'srpo.'}replay.${run}.`,
      });
    }
    const certificate = signErasureCertificate(erased.erasure, impact, rebuilt, await keys.signingKey(Date.now()), Date.now());
    const file = path.resolve(opts.certificate ?? `erasure-${erasureId}.json`);
    fs.writeFileSync(file, JSON.stringify(certificate, null, 2) + '\n');
    process.stdout.write(
      opts.json ? JSON.stringify({ impact, erasure: erased, rebuilt, certificate: file }, null, 2) + '\n' : formatImpact(impact, erased, rebuilt, file),
    );
  } finally {
    await store.close();
  }
}

async function withKeys(cfg: CliConfig, fn: (keys: KeyStore) => Promise<void>): Promise<void> {
  const keys = await KeyStore.open(cfg.store);
  try {
    await fn(keys);
  } finally {
    await keys.close();
  }
}

/**
 * `--adopt ID --policy P`: the rebuilt lineage of erasure ID (run erase-ID) becomes P's next
 * version (docs/erasure.md), announced on policy-versions, where the publisher and the agents
 * take it up like any version; the learner, started again, trains on from it. Refused while the
 * learner's consumer group has members: it would go on from the weights it holds.
 */
async function adopt(cfg: CliConfig, erasureId: string, policyId: string, learnerGroup: string, waitMs: number): Promise<void> {
  const kafka = createKafka(cfg.kafka);
  const admin = kafka.admin();
  await admin.connect();
  try {
    // A learner killed without leaving its group stays a member until its session times out.
    const deadline = Date.now() + waitMs;
    for (;;) {
      const [group] = (await admin.describeGroups([learnerGroup])).groups;
      const members = group?.members.length ?? 0;
      if (members === 0) break;
      if (Date.now() >= deadline) {
        throw new SrpoError(
          ErrorCode.CONFLICT,
          `the learner's consumer group ${learnerGroup} has ${members} member(s): stop the learner of ${policyId} first`,
          {
            field: 'learner-group',
          },
        );
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    await admin.disconnect();
  }
  const backend = backendLabel(await initTfBackend(cfg.backend, cfg.backendSettings));
  const store = await AuditStore.open(cfg.store);
  try {
    const detail = await adoptLineage(
      { store, checkpointDir: cfg.checkpointDir ?? path.resolve('.srpo/checkpoints'), backend, codeVersion: 'srpo erase --adopt' },
      { policyId, run: `erase-${erasureId}`, runDir: cfg.replayDir, erasureId, nowMs: Date.now() },
    );
    const { update, version } = eventsFor(detail);
    const publisher = new KafkaLearnerEventsPublisher({
      kafka,
      topics: topicCatalog(cfg.topics),
      codec: new EventCodec(undefined, { registry: cfg.schemaRegistry }),
    });
    try {
      await publisher.publish(update, version);
    } catch (e) {
      throw new SrpoError(
        ErrorCode.UNAVAILABLE,
        `${policyId} v${detail.versionAfter} is adopted and recorded, but announcing it failed (${errorMessage(e)}): the learner sends it again when it starts`,
        { retriable: true },
      );
    } finally {
      await publisher.disconnect();
    }
    process.stdout.write(
      `${policyId} v${detail.versionAfter} (${detail.weightsHashAfter}) adopted from run erase-${erasureId} (update ${detail.updateId}); announced on policy-versions\n`,
    );
  } finally {
    await store.close();
  }
}

/** `--announce ID`: the erasure as the store recorded it, written to the erasures topic again. */
async function announceRecorded(cfg: CliConfig, erasureId: string): Promise<void> {
  await withKeys(cfg, async (keys) => {
    const record = (await keys.erasures()).find((e) => e.erasureId === erasureId);
    if (!record) throw new SrpoError(ErrorCode.NOT_FOUND, `no erasure ${erasureId} is recorded in the store`, { field: 'announce' });
    const topic = topicCatalog(cfg.topics).erasures;
    const events = await announceErasure(createKafka(cfg.kafka), topic, new EventCodec(undefined, { registry: cfg.schemaRegistry }), record);
    process.stdout.write(`erasure ${erasureId} announced on ${topic.name} (${events} event(s), ${record.keyIds.length} key id(s))\n`);
  });
}

/** Exit 0 only for a good certificate; the reason otherwise. Trusts `publicKeyFile` when given, else this store's key. */
async function checkCertificate(cfg: CliConfig, file: string, publicKeyFile: string | undefined): Promise<void> {
  let cert: ErasureCertificate;
  try {
    cert = JSON.parse(fs.readFileSync(file, 'utf8')) as ErasureCertificate;
  } catch (e) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${file} is not a readable JSON certificate: ${(e as Error).message}`, { field: 'check-certificate' });
  }
  let trusted: string | undefined;
  if (publicKeyFile !== undefined) trusted = fs.readFileSync(publicKeyFile, 'utf8');
  else await withKeys(cfg, async (keys) => void (trusted = (await keys.signingKey(Date.now())).publicKeyPem));
  const result = checkErasureCertificate(cert, trusted);
  if (!result.ok) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `certificate ${file} does not check: ${result.reason}`);
  process.stdout.write(`certificate ${file}: good signature by ${cert.signer.keyId}; erasure ${cert.erasureId} of ${cert.scope} ${cert.target}\n`);
}

function scopeOf(opts: EraseOptions): ErasureScope {
  if ((opts.subject === undefined) === (opts.episode === undefined)) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, 'give --subject ID or --episode ID (one of them)', { field: 'subject' });
  }
  const id = (opts.subject ?? opts.episode) as string;
  if (id.length === 0 || id.length > 256) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `the id must be 1 to 256 characters, got ${id.length}`, { field: opts.subject ? 'subject' : 'episode' });
  }
  return opts.subject !== undefined ? { subjectId: opts.subject } : { episodeId: id };
}

function formatImpact(impact: ErasureImpact, erased: ErasureResult | undefined, rebuilt: RebuiltLineage | null, certificate: string | undefined): string {
  const what = 'subjectId' in impact.scope ? `subject ${impact.scope.subjectId}` : `episode ${impact.scope.episodeId}`;
  const lines = [
    `${what}: ${impact.keyIds.length} content key(s); ${impact.sets.length} trained set(s) in ${impact.updates.length} update(s); ${impact.versions.length} version(s) reached`,
  ];
  for (const u of impact.updates) lines.push(`  update ${u.updateId}  ${u.policyId} v${u.versionBefore} -> v${u.versionAfter}`);
  for (const s of impact.sets) lines.push(`    set ${s.setId} (episode ${s.episodeId}) in group ${s.groupId}`);
  for (const v of impact.versions) lines.push(`  version ${v.policyId} v${v.version} ${v.direct ? 'trained on it' : 'descends from it'}  ${v.checkpointUri}`);
  for (const c of impact.cleanBefore) lines.push(`  ${c.policyId}: v${c.version} is the last version it never reached (where a rebuild starts)`);
  if (!erased) return [...lines, 'dry run: nothing was deleted'].join('\n') + '\n';
  lines.push(
    `erased: ${erased.erasure.erasureId}, ${erased.erasure.keyIds.length} key(s) deleted (store files: ${erased.scrub}); announced to the materializers`,
  );
  if (rebuilt) {
    lines.push(
      `rebuilt: ${rebuilt.policyId} from v${rebuilt.fromVersion} to v${rebuilt.head.version} (${rebuilt.head.weightsHash}) in run ${rebuilt.run}; ` +
        `${rebuilt.verified} update(s) verified, none cites the erased data; its checkpoint: ${rebuilt.head.checkpointUri}`,
    );
  }
  if (certificate) lines.push(`certificate: ${certificate}`);
  return lines.join('\n') + '\n';
}
