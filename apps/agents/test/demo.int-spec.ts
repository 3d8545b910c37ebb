import { spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { createKafka, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { ensureKafka, sleep } from '@srpo/testing';
import { rateOf, sortedByTime, wilson, workflowOf, type OutcomePoint } from '../src/demo/demo-stats';

/**
 * Training is measured in progress, not wall time: the run ends once every policy has applied
 * this many updates, so a slow machine trains as far as a fast one, only for longer. 160 for the
 * slowest policies (the actor gets ~1.5× as many) is ~75 s on an AVX-512 machine of this kind
 * and ~3 min on one core. Wall time is only a safety bound.
 */
const UPDATES = 160;
const MAX_SECONDS = 600;

/**
 * The short demo, exactly as `npm run demo` runs it (real processes, real broker):
 * trains, prints the summary, keeps serving the audit API (--serve) until
 * interrupted, and stops cleanly on SIGINT. Everything asserted about learning is
 * read back from the topics, not from the demo's own report.
 */
describe('srpo demo (short run on the real broker)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'demo-test' });
  const codec = new EventCodec();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-demo-test-'));
  // Below Linux's ephemeral range (32768-60999): a port there can be taken by any outgoing socket.
  const port = 21_000 + Math.floor(Math.random() * 1000);
  let stdout = '';
  let exitCode: number | null = null;
  let prefix = '';

  beforeAll(
    async () => {
      const child = spawn(
        process.execPath,
        [path.join(repoRoot(), 'bin', 'srpo.js'), 'demo', '--updates', String(UPDATES), '--target', '0', '--seconds', String(MAX_SECONDS), '--serve'],
        {
          env: {
            PATH: process.env.PATH ?? '',
            HOME: process.env.HOME ?? '',
            KAFKA_BROKERS: brokers.join(','),
            SRPO_DEMO_DIR: dir,
            SRPO_DEMO_HTTP_PORT: String(port),
            SRPO_DEMO_LOG_MS: '10000',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stdout += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      // Training, then the summary; with --serve the learners stay up until Ctrl-C.
      const deadline = Date.now() + (MAX_SECONDS + 150) * 1000;
      while (!/keep serving it until Ctrl-C/.test(stdout)) {
        if (child.exitCode !== null || Date.now() > deadline) {
          child.kill('SIGKILL');
          throw new Error(`demo ended or timed out before its summary:\n${stdout}`);
        }
        await sleep(500);
      }
      prefix = /topics (\S+)\*/.exec(stdout)?.[1] ?? '';
      // Bounded, retried: a request that never answers must fail the test, not hold it (and jest) open.
      try {
        for (let attempt = 1; ; attempt++) {
          try {
            const res = await fetch(`http://127.0.0.1:${port}/updates?policy=actor&limit=1000`, { signal: AbortSignal.timeout(15_000) });
            auditUpdates = ((await res.json()) as unknown[]).length;
            break;
          } catch (e) {
            if (attempt >= 5) throw e;
            await sleep(1000);
          }
        }
      } finally {
        child.kill('SIGINT');
      }
      exitCode = await exited;
    },
    (MAX_SECONDS + 240) * 1000,
  );

  let auditUpdates = 0;

  it('ran and stopped cleanly on Ctrl-C, children in order, nothing dead-lettered', async () => {
    expect(exitCode).toBe(0);
    expect(stdout).toMatch(/\| fixed +\|/);
    // It ended on progress, not on the safety bound.
    expect(stdout).toMatch(new RegExp(`every policy applied ${UPDATES} updates at \\d+:\\d\\d; stopping`));
    for (const log of ['agents.log', 'materializer.log', 'learner-actor.log']) {
      expect(fs.readFileSync(path.join(dir, log), 'utf8')).toMatch(/"msg":"(shutting down|learner stopping)"/);
    }
    // The agents' last outcomes were released once the materializer had consumed their transitions.
    expect(fs.readFileSync(path.join(dir, 'agents.log'), 'utf8')).not.toMatch(/sending the outcomes anyway/);
    const catalog = topicCatalog({ prefix });
    expect(await readTopicsToEnd(kafka, [catalog.deadLetter.name, catalog.invalidSets.name])).toHaveLength(0);
    // Learners' ports are closed after the interrupt.
    await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
  });

  it('printed no error-level line from start to stop', () => {
    // The demo's own output (kafkajs's lines included, through the structured logger).
    expect(stdout).not.toMatch(/"level":"error"/);
    expect(stdout).not.toMatch(/\bERROR\b|Crash:|write after end/);
  });

  it('applied updates and advanced every policy version one by one; the audit API listed them', async () => {
    const catalog = topicCatalog({ prefix });
    const versions = (await readTopicsToEnd(kafka, [catalog.policyVersions.name])).map((r) => codec.decodeAs('PolicyVersion', r.value));
    for (const policy of ['actor', 'judge', 'aggregator']) {
      const vs = versions.filter((v) => v.policyId === policy).map((v) => v.version);
      expect(vs.length).toBeGreaterThanOrEqual(UPDATES);
      expect(new Set(vs).size).toBe(Math.max(...vs)); // 1..n, none missing (republishes repeat one)
    }
    expect(auditUpdates).toBeGreaterThanOrEqual(UPDATES);
  });

  it('the agents picked up new versions: outputs stamped with version > 0 exist for every policy', async () => {
    const catalog = topicCatalog({ prefix });
    const newest = new Map<string, number>();
    for (const r of await readTopicsToEnd(kafka, [catalog.agentOutputs.name], { timeoutMs: 60_000 })) {
      const o = codec.decodeAs('AgentOutput', r.value);
      newest.set(o.policyId, Math.max(newest.get(o.policyId) ?? 0, o.policyVersion));
    }
    expect([...newest.keys()].sort()).toEqual(['actor', 'aggregator', 'judge']);
    for (const v of newest.values()) expect(v).toBeGreaterThanOrEqual(10);
  });

  it('the fixed workflow success rate rose: the end 95% interval lies wholly above the start one', async () => {
    // Start: the first 160 episodes (version 0 or near it). End: the last third of training.
    // With thousands of end episodes, disjoint Wilson intervals make this a significance
    // test, not a threshold on one noisy number; measured ~0-1% → 20-40% at this progress.
    const catalog = topicCatalog({ prefix });
    const byWorkflow = new Map<string, OutcomePoint[]>();
    for (const r of await readTopicsToEnd(kafka, [catalog.episodeOutcomes.name], { timeoutMs: 60_000 })) {
      const o = codec.decodeAs('EpisodeOutcome', r.value);
      byWorkflow.set(workflowOf(o), [...(byWorkflow.get(workflowOf(o)) ?? []), { eventTimeMs: o.eventTimeMs, success: o.success }]);
    }
    expect([...byWorkflow.keys()].sort()).toEqual(['fixed', 'joint', 'routed']);
    const fixed = sortedByTime(byWorkflow.get('fixed') ?? []);
    const first = fixed[0].eventTimeMs;
    const last = fixed[fixed.length - 1].eventTimeMs;
    const start = rateOf(fixed.slice(0, 160));
    const end = rateOf(fixed.filter((p) => p.eventTimeMs >= last - (last - first) / 3));
    expect(end.episodes).toBeGreaterThan(500);
    expect(wilson(end)[0]).toBeGreaterThan(wilson(start)[1]);
  });
});
