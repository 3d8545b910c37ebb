import * as fs from 'fs';
import * as path from 'path';
import { Command } from 'commander';
import { ErrorCode, initTfBackend, repoRoot, SrpoError } from '@srpo/core';
import { createKafka, EventCodec, topicCatalog } from '@srpo/events';
import {
  CREDIT_MODES,
  DEFAULT_MAX_FAILED_SHARE,
  loadRegisteredPolicy,
  PolicyTaskInferrer,
  runOfflineJob,
  type CreditMode,
  type OfflineProgress,
  type OfflineReport,
  type TaskInferrer,
} from '@srpo/offline';
import { backendLabel } from '@srpo/kernels';
import { type Policy } from '@srpo/policy';
import { AuditStore, KeyStore } from '@srpo/store';
import { DemoEnvTaskInferrer } from '@srpo/workflows';
import { CliConfig } from '../cli-config';

interface OfflineCliOptions {
  from: string;
  to: string;
  policy: string;
  credit: string;
  run?: string;
  scorer?: string;
  inferrer: string;
  maxFailedShare: string;
  failedRewardAtMost: string;
  failedAt?: string;
  steps: string;
  batchSize: string;
  lr: string;
  seed: string;
  modulus: string;
  reverseLength: string;
  runsDir: string;
  allActions: boolean;
  json: boolean;
}

/** `srpo offline`: AgentBrew offline training over a time range of the raw event log. */
export function offlineCommand(config: () => CliConfig): Command {
  return new Command('offline')
    .description(
      'AgentBrew offline training: infer the task each raw trajectory in [--from, --to) fulfilled, score PMI credits per action, publish both as events, ' +
        "train a new policy version by credit-weighted SFT and record it in the run's own audit store (<runs-dir>/<run>/)",
    )
    .requiredOption('--from <time>', 'first raw record time, inclusive (ISO 8601 or epoch ms)')
    .requiredOption('--to <time>', 'end of the range, exclusive (ISO 8601 or epoch ms)')
    .requiredOption('--policy <id>', 'policy to train, from the audit store (its current version)')
    .option('--credit <mode>', `credit mode (${CREDIT_MODES.join(', ')})`, 'adjacent')
    .option('--run <name>', 'run name ([A-Za-z0-9._-]+); default offline-<epoch ms>')
    .option('--scorer <id>', 'scorer language model, from the audit store; default the trained policy (its starting weights)')
    .option('--inferrer <kind>', 'task inferrer: env (the demo environments, hindsight relabelling) or policy (the scorer writes the instruction)', 'env')
    .option('--max-failed-share <x>', 'trajectories with a larger share of failed actions are not used', String(DEFAULT_MAX_FAILED_SHARE))
    .option('--failed-reward-at-most <x>', 'a step whose reward (or, without one, the outcome reward) is at most this failed', '0')
    .option(
      '--failed-at <pos=x,...>',
      "per-position thresholds replacing --failed-reward-at-most (e.g. check=0.1: the demo checker's format bonus is a failure)",
    )
    .option('--steps <n>', 'optimizer steps', '200')
    .option('--batch-size <n>', 'examples per step', '64')
    .option('--lr <x>', 'Adam learning rate', '5e-4')
    .option('--seed <n>', 'shuffle seed', '1')
    .option('--modulus <k>', 'env inferrer: the arithmetic modulus the agents ran with', '4')
    .option('--reverse-length <n>', 'env inferrer: digits per fixed-workflow task', '1')
    .option('--all-actions', 'train on every action, not only those the policy sampled (AgentOutput.policyId)', false)
    .option('--runs-dir <dir>', 'where runs live', '.srpo/offline')
    .option('--json', 'print the report as JSON', false)
    .action(async (opts: OfflineCliOptions) => {
      const cfg = config();
      const fromMs = parseTime('--from', opts.from);
      const toMs = parseTime('--to', opts.to);
      if (fromMs >= toMs) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--from must be before --to (${opts.from} .. ${opts.to})`);
      if (!(CREDIT_MODES as readonly string[]).includes(opts.credit))
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--credit must be one of ${CREDIT_MODES.join(', ')}, got ${opts.credit}`);
      if (opts.inferrer !== 'env' && opts.inferrer !== 'policy')
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--inferrer must be env or policy, got ${opts.inferrer}`);
      const maxFailedShare = num('--max-failed-share', opts.maxFailedShare);
      if (maxFailedShare > 1) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--max-failed-share must be in [0, 1], got ${opts.maxFailedShare}`);
      const stepRule = { failedRewardAtMost: Number(opts.failedRewardAtMost), byPosition: parsePositions(opts.failedAt) };
      if (!Number.isFinite(stepRule.failedRewardAtMost))
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--failed-reward-at-most must be a finite number, got ${opts.failedRewardAtMost}`);
      const steps = int('--steps', opts.steps, 1);
      const batchSize = int('--batch-size', opts.batchSize, 1);
      const lr = num('--lr', opts.lr);
      const seed = int('--seed', opts.seed, 0);
      const modulus = int('--modulus', opts.modulus, 2);
      const reverseLength = int('--reverse-length', opts.reverseLength, 1);
      const backend = await initTfBackend(cfg.backend, cfg.backendSettings);
      const store = await AuditStore.open(cfg.store);
      let policy: Policy;
      let scorer: Policy;
      try {
        policy = (await loadRegisteredPolicy(store, opts.policy, cfg.checkpointDir)).policy;
        scorer = (await loadRegisteredPolicy(store, opts.scorer ?? opts.policy, cfg.checkpointDir)).policy;
      } catch (e) {
        await store.close();
        throw e;
      }
      const inferrer: TaskInferrer = opts.inferrer === 'env' ? new DemoEnvTaskInferrer({ modulus, reverseLength }) : new PolicyTaskInferrer(scorer, { seed });
      const bar = progressBar(process.stderr);
      let report: OfflineReport;
      try {
        report = await runOfflineJob({
          // Sealed outputs open with the same store's content keys (docs/erasure.md); an erased one leaves its episode out.
          keys: new KeyStore(store.dataSource),
          kafka: createKafka(cfg.kafka),
          codec: new EventCodec(undefined, { maxPayloadBytes: cfg.maxPayloadBytes }),
          catalog: topicCatalog(cfg.topics),
          fromMs,
          toMs,
          run: opts.run ?? `offline-${Date.now()}`,
          runsDir: path.resolve(opts.runsDir),
          policy,
          scorer,
          inferrer,
          creditMode: opts.credit as CreditMode,
          maxFailedShare,
          stepRule,
          trainOn: opts.allActions ? 'all' : 'policy',
          sft: { steps, batchSize, lr, seed },
          backend: backendLabel(backend),
          codeVersion: codeVersion(),
          onProgress: bar,
        });
      } finally {
        process.stderr.write('\n');
        policy.dispose();
        scorer.dispose();
        await store.close();
      }
      process.stdout.write(opts.json ? JSON.stringify(report, null, 2) + '\n' : formatReport(report));
    });
}

const PHASES: OfflineProgress['phase'][] = ['read', 'infer', 'publish', 'train', 'record'];

/** One line redrawn in place on a terminal; elsewhere a line per tenth of each phase. */
function progressBar(out: NodeJS.WriteStream): (p: OfflineProgress) => void {
  let lastLogged = '';
  return (p) => {
    const frac = p.total > 0 ? p.done / p.total : 1;
    const width = 24;
    const filled = Math.round(frac * width);
    const line = `offline [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${PHASES.indexOf(p.phase) + 1}/${PHASES.length} ${p.phase} ${p.done}/${p.total}`;
    if (out.isTTY) {
      out.write(`\r${line}`);
      return;
    }
    const key = `${p.phase}:${Math.floor(frac * 10)}`;
    if (key !== lastLogged) {
      lastLogged = key;
      out.write(`${line}\n`);
    }
  };
}

function parsePositions(raw: string | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  if (raw === undefined) return out;
  for (const part of raw.split(',')) {
    const [pos, value] = part.split('=');
    const x = Number(value);
    if (!pos || value === undefined || value.trim() === '' || !Number.isFinite(x))
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--failed-at must be pos=x[,pos=x...], got ${raw}`);
    out[pos] = x;
  }
  return out;
}

function codeVersion(): string {
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(repoRoot(), 'package.json'), 'utf8')) as { name?: string; version?: string };
    if (pkg.name && pkg.version) return `${pkg.name}@${pkg.version}`;
  } catch {
    // Outside the repository: the record says so.
  }
  return 'unknown';
}

function num(flag: string, raw: string): number {
  const v = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(v) || v < 0) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${flag} must be a finite number >= 0, got ${raw}`);
  return v;
}

function int(flag: string, raw: string, min: number): number {
  const v = Number(raw);
  if (!Number.isSafeInteger(v) || v < min) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${flag} must be an integer >= ${min}, got ${raw}`);
  return v;
}

function parseTime(flag: string, raw: string): number {
  const ms = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw);
  if (!Number.isFinite(ms)) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${flag} must be ISO 8601 or epoch ms, got ${raw}`);
  return ms;
}

function formatReport(r: OfflineReport): string {
  const excluded = Object.entries(r.excluded)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
  return (
    [
      `run ${r.run}: ${r.trajectories} trajectories, ${r.usable} used${excluded ? ` (not used: ${excluded})` : ''}; inferrer ${r.inferrer}, credit ${r.creditMode}`,
      `events: ${r.inferredTaskEvents} inferred tasks, ${r.actionCreditEvents} action credits`,
      `training: ${r.training.steps} steps over ${r.examples} weighted examples, loss ${r.training.firstLoss.toFixed(4)} -> ${r.training.lastLoss.toFixed(4)}`,
      `update ${r.updateId}: ${r.policyId} v${r.versionBefore} -> v${r.versionAfter}, weights ${r.weightsHashBefore.slice(0, 16)} -> ${r.weightsHashAfter.slice(0, 16)}`,
      `checkpoint ${r.checkpointDir}; store ${r.store}`,
    ].join('\n') + '\n'
  );
}
