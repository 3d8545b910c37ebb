import { randomBytes } from 'crypto';
import { Command } from 'commander';
import { AuditService, erasureImpact, type ErasureImpact } from '@srpo/audit';
import { ErrorCode, SrpoError } from '@srpo/core';
import { createKafka, EventCodec } from '@srpo/events';
import { AuditStore, KeyStore, type ErasureResult, type ErasureScope } from '@srpo/store';
import { CliConfig } from '../cli-config';

interface EraseOptions {
  subject?: string;
  episode?: string;
  policy?: string;
  dryRun: boolean;
  json: boolean;
}

/**
 * `srpo erase --subject ID | --episode ID [--dry-run]`: crypto-shredding of a data subject's (or an
 * episode's) content (docs/erasure.md). It reports every set, update and policy version the data
 * reached, then, unless `--dry-run`, deletes the content keys and records the erasure.
 */
export function eraseCommand(config: () => CliConfig): Command {
  return new Command('erase')
    .description(
      "erase a data subject's or an episode's content by deleting its content keys, after reporting every update and policy version it reached " +
        '(store: SRPO_DATABASE_URL or SRPO_SQLITE_PATH; events: KAFKA_BROKERS)',
    )
    .option('--subject <id>', 'the data subject (the subjectId its events carry)')
    .option('--episode <id>', 'one episode')
    .option('--policy <id>', 'report on this policy only (default: every policy in the store)')
    .option('--dry-run', 'report the impact and delete nothing', false)
    .option('--json', 'print the report as JSON', false)
    .action(async (opts: EraseOptions) => {
      const scope = scopeOf(opts);
      const cfg = config();
      const store = await AuditStore.open(cfg.store);
      try {
        const keys = new KeyStore(store.dataSource, { cacheMs: 0 });
        const audit = new AuditService({
          store,
          kafka: createKafka(cfg.kafka),
          backend: 'none',
          codec: new EventCodec(undefined, { registry: cfg.schemaRegistry }),
          keys,
        });
        const impact = await erasureImpact({ store, audit, keys }, scope, opts.policy ? { policyId: opts.policy } : {});
        const erased = opts.dryRun ? undefined : await keys.erase(scope, `er-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`, Date.now());
        process.stdout.write(opts.json ? JSON.stringify({ impact, erasure: erased ?? null }, null, 2) + '\n' : formatImpact(impact, erased));
      } finally {
        await store.close();
      }
    });
}

function scopeOf(opts: EraseOptions): ErasureScope {
  if ((opts.subject === undefined) === (opts.episode === undefined)) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, 'give --subject ID or --episode ID (one of them)', { field: 'subject' });
  }
  const id = (opts.subject ?? opts.episode) as string;
  if (id.length === 0 || id.length > 256)
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `the id must be 1 to 256 characters, got ${id.length}`, { field: opts.subject ? 'subject' : 'episode' });
  return opts.subject !== undefined ? { subjectId: opts.subject } : { episodeId: id };
}

function formatImpact(impact: ErasureImpact, erased: ErasureResult | undefined): string {
  const what = 'subjectId' in impact.scope ? `subject ${impact.scope.subjectId}` : `episode ${impact.scope.episodeId}`;
  const lines = [
    `${what}: ${impact.keyIds.length} content key(s); ${impact.sets.length} trained set(s) in ${impact.updates.length} update(s); ${impact.versions.length} version(s) reached`,
  ];
  for (const u of impact.updates) lines.push(`  update ${u.updateId}  ${u.policyId} v${u.versionBefore} -> v${u.versionAfter}`);
  for (const s of impact.sets) lines.push(`    set ${s.setId} (episode ${s.episodeId}) in group ${s.groupId}`);
  for (const v of impact.versions) lines.push(`  version ${v.policyId} v${v.version} ${v.direct ? 'trained on it' : 'descends from it'}  ${v.checkpointUri}`);
  for (const c of impact.cleanBefore) lines.push(`  ${c.policyId}: v${c.version} is the last version it never reached (where a rebuild starts)`);
  lines.push(
    erased
      ? `erased: ${erased.erasure.erasureId}, ${erased.erasure.keyIds.length} key(s) deleted (store files: ${erased.scrub})`
      : 'dry run: nothing was deleted',
  );
  return lines.join('\n') + '\n';
}
