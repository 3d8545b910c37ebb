import { spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { describeSmollm2, ensureKafka, pidAlive, upChildPids } from '@srpo/testing';

/**
 * `srpo demo --llm` as a newcomer runs it (bin/srpo.js, the compiled apps of `npm run build`) on
 * the real SmolLM2-135M-Instruct and the real broker, in short settings: it starts `srpo up`,
 * evaluates before training, plays, publishes versions, evaluates on a timer and at the end of a
 * time-boxed run (--until time: the test checks the loop, not how much the model learns), stops
 * the topology in order, exits 0, and leaves no process behind and no error-level line in the
 * topology's log. Learning is measured by the full demo (docs/demo.md), not here.
 */
/** Version 1 is served within the first minute of training here (2 vCPUs); 120 s leaves room for a slower machine. */
const SECONDS = 120;
const EVAL_EVERY = 60;
const HELD_OUT = 16;
/** Start-up (the model loads in three processes), the evaluations and the orderly stop come on top of the training time. */
const BOUND_MS = (SECONDS + 900) * 1000;

interface ResultFile {
  endedBy: string;
  verdict: string;
  evaluations: { label: string; atSeconds: number; versions: number[]; successes: number; trials: number; low: number; high: number }[];
  updates: number | null;
  newestVersionServed: number | null;
  episodes: number;
  tasks: number;
  trainingRewards: { reward: number }[];
  topology: { pid: number; log: string; exitCode: number | null; forced: boolean };
}

describeSmollm2('srpo demo --llm (SmolLM2-135M-Instruct, real broker, real processes)', (modelDir) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-llm-demo-'));
  let output = '';
  let exitCode: number | null = null;
  let result: ResultFile;
  let log = '';

  beforeAll(async () => {
    const child = spawn(
      process.execPath,
      [
        path.join(repoRoot(), 'bin', 'srpo.js'),
        'demo',
        '--llm',
        '--seconds',
        String(SECONDS),
        '--held-out',
        String(HELD_OUT),
        '--eval-every',
        String(EVAL_EVERY),
        '--until',
        'time',
      ],
      {
        env: {
          PATH: process.env.PATH ?? '',
          HOME: process.env.HOME ?? '',
          KAFKA_BROKERS: ensureKafka().join(','),
          SRPO_SMOLLM2_DIR: modelDir,
          SRPO_DEMO_LLM_DIR: dir,
          // The demo's rows need a few thousand cache slots; a smaller cache than serve's default
          // leaves memory to whatever else this machine runs.
          SRPO_SERVE_KV_CACHE_TOKENS: '8192',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // A hung run must fail the test, not hold jest: SIGINT is the demo's own orderly stop, a
    // second one kills (the demo then has srpo up kill its children).
    const timers = [setTimeout(() => child.kill('SIGINT'), BOUND_MS), setTimeout(() => child.kill('SIGINT'), BOUND_MS + 100_000)];
    exitCode = await exited;
    for (const t of timers) clearTimeout(t);
    result = JSON.parse(fs.readFileSync(path.join(dir, 'result.json'), 'utf8')) as ResultFile;
    log = fs.readFileSync(path.join(dir, 'topology.log'), 'utf8');
  }, BOUND_MS + 180_000);

  it('ran to the time limit and exited 0', () => {
    expect({ exitCode, endedBy: result.endedBy }).toEqual({ exitCode: 0, endedBy: 'time' });
    expect(output).toMatch(/^llm-demo: ready: gateway http:\/\/127\.0\.0\.1:8110\/v1/m);
    expect(output).toMatch(/ended at the time limit/);
    expect(output).toMatch(/^verdict: (clear gain|no clear gain yet) /m);
  });

  it('evaluated at version 0 before training, then on the timer and at the end, at increasing times', () => {
    const evals = result.evaluations;
    expect(evals.length).toBeGreaterThanOrEqual(2);
    expect(evals[0]).toMatchObject({ label: 'start', atSeconds: 0, versions: [0], trials: HELD_OUT });
    expect(evals[evals.length - 1].label).toBe('final');
    for (let i = 1; i < evals.length; i++) expect(evals[i].atSeconds).toBeGreaterThan(evals[i - 1].atSeconds);
    for (const e of evals) {
      expect(e.trials).toBe(HELD_OUT);
      expect(e.low).toBeLessThanOrEqual(e.successes / e.trials);
      expect(e.high).toBeGreaterThanOrEqual(e.successes / e.trials);
    }
  });

  it('recorded episodes and published at least one version beyond 0, which answered', () => {
    expect(result.episodes).toBeGreaterThan(0);
    expect(result.episodes).toBe(8 * result.tasks);
    expect(result.trainingRewards).toHaveLength(result.tasks);
    expect(result.updates).toBeGreaterThanOrEqual(1);
    expect(result.newestVersionServed).toBeGreaterThanOrEqual(1);
    expect(log).toMatch(/update applied .*versionAfter=1 /);
  });

  it('stopped srpo up in order: every process gone, no error-level line in its log', () => {
    expect(result.topology).toMatchObject({ exitCode: 0, forced: false });
    expect(log).toMatch(/^srpo up: every process stopped$/m);
    const pids = Object.values(upChildPids(log, path.join(dir, 'topology.log')));
    for (const pid of [result.topology.pid, ...pids]) expect(pidAlive(pid)).toBe(false);
    // The log view prints `<role> <time> <level> ...`; a crash prints a stack trace.
    expect(log).not.toMatch(/^\S+ +(\d\d:\d\d:\d\d )?error /m);
    expect(log).not.toMatch(/Crash:|Uncaught|^(materializer|learner|serve|gateway) +at /m);
  });
});
