/**
 * bench/soak: runs the whole system (agents, materializer, one learner per policy, as separate
 * processes, exactly as `srpo demo` does) for a long time and samples, every `--sample`
 * seconds: RSS of each process, events produced (raw topics' end offsets), policy updates,
 * dead letters, and the consumer lag of the materializer's and the learners' groups. At the
 * end it reports rates, the RSS trend of each process once warm (it must stay flat), the
 * largest lag, and every error-level log line, and writes the samples as JSON.
 *
 *   npm run build && npm run build:bench && node dist-bench/bench/soak/run.js [--minutes 30] [--sample 30] [--warmup-minutes 12]
 *
 * The warm-up (default 12 min, or a third of a shorter run) must outlast the materializer's
 * dedupe retention (10 min of event time): until then its stores grow by design, keeping
 * closed episodes' ids to recognise late duplicates.
 *
 * Environment as for `srpo demo` (SRPO_AGENTS_WORKFLOWS, KAFKA_BROKERS, ...). Not in CI.
 * docs/soak.md records the latest result.
 */
import * as fs from 'fs';
import * as path from 'path';
import type { Admin } from 'kafkajs';
import { errorMessage, Logger } from '@srpo/core';
import { createKafka } from '@srpo/events';
import { loadDemoConfig } from '../../apps/agents/src/demo/demo-config';
import { DemoRunner, freePort } from '../../apps/agents/src/demo/demo.service';
import { consumerLag, parseGauge, parseRssAnonMb, parseVmRssMb, ratePerSecond, rssTrend, type RssSample } from './soak-stats';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v <= 0) {
    process.stderr.write(`soak: --${name} must be a positive number, got "${process.argv[i + 1]}"\n`);
    process.exit(2);
  }
  return v;
};

interface Sample {
  t: number;
  rssMb: Record<string, number>;
  /** Anonymous RSS (without file-backed pages such as LMDB's maps). */
  anonMb: Record<string, number>;
  events: number;
  updates: number;
  deadLetters: number;
  lag: Record<string, number>;
  /** The materializer's V8 heap in use (its /metrics), MB. */
  materializerHeapMb?: number;
  /** The materializer's state: entries per store, summed over tasks. */
  storeEntries?: Record<string, number>;
  /** Disk allocated to the materializer's local state copies (SRPO_STATE_DIR), MB. */
  stateDiskMb?: number;
}

/** Bytes allocated on disk under `dir` (st_blocks, so sparse LMDB files count what they use). */
function diskMb(dir: string): number | undefined {
  let bytes = 0;
  const walk = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) bytes += fs.statSync(p).blocks * 512;
    }
  };
  try {
    walk(dir);
  } catch {
    return undefined;
  }
  return bytes / 2 ** 20;
}

/** Heap and store sizes from the materializer's /metrics (SRPO_METRICS_PORT). */
async function scrapeMaterializer(port: number): Promise<{ heapMb?: number; stores: Record<string, number> }> {
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
  const heap = parseGauge(text, 'srpo_process_heap_used_bytes').get('');
  const stores: Record<string, number> = {};
  for (const [labels, v] of parseGauge(text, 'srpo_stream_store_entries')) {
    const app = /app="([^"]*)"/.exec(labels)?.[1] ?? '?';
    const store = /store="([^"]*)"/.exec(labels)?.[1] ?? '?';
    stores[`${app}.${store}`] = (stores[`${app}.${store}`] ?? 0) + v;
  }
  return { heapMb: heap === undefined ? undefined : heap / 2 ** 20, stores };
}

async function sumEnds(admin: Admin, topic: string): Promise<number> {
  const ends = await admin.fetchTopicOffsets(topic);
  return ends.reduce((a, p) => a + (Number(p.high) - Number(p.low)), 0);
}

async function groupLag(admin: Admin, groupId: string, topics: string[]): Promise<number> {
  let lag = 0;
  for (const topic of topics) {
    const ends = (await admin.fetchTopicOffsets(topic)).map((p) => ({ partition: p.partition, high: Number(p.high), low: Number(p.low) }));
    const committed = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0]?.partitions ?? [];
    lag += consumerLag(ends, new Map(committed.map((c) => [c.partition, Number(c.offset)])));
  }
  return lag;
}

function rssOf(pid: number | undefined, parse: (status: string) => number | undefined = parseVmRssMb): number | undefined {
  if (pid === undefined) return undefined;
  try {
    return parse(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return undefined;
  }
}

function errorLines(file: string): string[] {
  try {
    return fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.includes('"level":"error"'));
  } catch {
    return [];
  }
}

async function main(): Promise<void> {
  const minutes = arg('minutes', 30);
  const sampleS = arg('sample', 30);
  const warmupS = arg('warmup-minutes', Math.min(12, minutes / 3)) * 60;
  const runId = `soak-${new Date().toISOString().slice(0, 16).replace(/[-:T]/g, '')}`;
  // Only the materializer reads SRPO_METRICS_PORT: its heap and store sizes are sampled from it.
  const metricsPort = await freePort(9464);
  const config = loadDemoConfig(
    { ...process.env, SRPO_DEMO_RUN_ID: process.env.SRPO_DEMO_RUN_ID ?? runId, SRPO_METRICS_PORT: String(metricsPort) },
    // Target 0: the demo would otherwise end once its success target is held, long before the soak.
    { seconds: Math.round(minutes * 60), target: 0 },
  );
  // The materializer's local state goes under the run's directory unless placed elsewhere, so
  // that it starts empty and its size on disk can be sampled. Only the materializer reads it.
  const stateDir = config.childEnv.SRPO_STATE_DIR ?? path.join(config.runDir, 'state');
  config.childEnv.SRPO_STATE_DIR = stateDir;
  Logger.configure({ level: 'warn' });
  fs.mkdirSync(config.runDir, { recursive: true });
  const progressFile = path.join(config.runDir, 'soak-progress.log');
  const runner = new DemoRunner(config, { write: (s) => fs.appendFileSync(progressFile, s), isTTY: false });
  const c = config;
  const kafka = createKafka(c.kafka);
  const admin = kafka.admin();
  const samples: Sample[] = [];
  const samplerErrors: string[] = [];
  let t0 = 0;
  let stop = false;

  const sampler = (async () => {
    while (runner.processes().every((p) => !p.name.startsWith('agents')) && !stop) await new Promise((r) => setTimeout(r, 500));
    t0 = Date.now();
    await admin.connect();
    while (!stop) {
      try {
        const rssMb: Record<string, number> = {};
        const anonMb: Record<string, number> = {};
        for (const p of runner.processes()) {
          const mb = p.alive ? rssOf(p.pid) : undefined;
          if (mb !== undefined) rssMb[p.name] = mb;
          const anon = p.alive ? rssOf(p.pid, parseRssAnonMb) : undefined;
          if (anon !== undefined) anonMb[p.name] = anon;
        }
        const cat = runner.catalog;
        const raw = [cat.agentOutputs.name, cat.transitions.name, cat.episodeOutcomes.name];
        let events = 0;
        for (const t of raw) events += await sumEnds(admin, t);
        const lag: Record<string, number> = {
          'materializer.sets': await groupLag(admin, `${c.materializerAppId}.sets`, raw),
          'materializer.groups': await groupLag(admin, `${c.materializerAppId}.groups`, [cat.activeSets.name]),
        };
        for (const l of c.learners) lag[`learner ${l.policyId}`] = await groupLag(admin, `${c.topics.prefix}learner.${l.policyId}`, [cat.advantageGroups.name]);
        const scraped = await scrapeMaterializer(metricsPort).catch(() => undefined);
        samples.push({
          t: (Date.now() - t0) / 1000,
          rssMb,
          anonMb,
          events,
          updates: await sumEnds(admin, cat.policyUpdates.name),
          deadLetters: await sumEnds(admin, cat.deadLetter.name),
          lag,
          materializerHeapMb: scraped?.heapMb,
          storeEntries: scraped?.stores,
          stateDiskMb: diskMb(stateDir),
        });
        const s = samples[samples.length - 1];
        process.stderr.write(
          `soak ${(s.t / 60).toFixed(1)}/${minutes} min: ${s.events} events, ${s.updates} updates, lag ${JSON.stringify(s.lag)}, RSS ${Object.entries(s.rssMb)
            .map(([k, v]) => `${k} ${v.toFixed(0)}`)
            .join(', ')} MB\n`,
        );
      } catch (e) {
        samplerErrors.push(errorMessage(e));
      }
      const wait = Date.now() + sampleS * 1000;
      while (!stop && Date.now() < wait) await new Promise((r) => setTimeout(r, 250));
    }
    await admin.disconnect().catch(() => undefined);
  })();

  const onSignal = () => runner.requestStop();
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const result = await runner.run();
  stop = true;
  await sampler;
  // Writes the demo's summary into the progress file and stops its monitor's consumer.
  await runner.summarize(result);

  const names = [...new Set(samples.flatMap((s) => Object.keys(s.rssMb)))];
  const first = samples.find((s) => s.t >= warmupS) ?? samples[0];
  const last = samples[samples.length - 1];
  const out: string[] = [];
  const span = last && first ? last.t - first.t : 0;
  out.push(`# Soak ${c.runId}: ${minutes} min, workflows ${c.agents.workflows.join(',')}, ${new Date().toISOString()}`);
  out.push('');
  if (!last || !first) {
    out.push('no samples were taken');
  } else {
    out.push(`| measure (after ${(warmupS / 60).toFixed(1)} min warm-up) | value |`);
    out.push('| --- | --- |');
    out.push(`| events/s (raw topics) | ${ratePerSecond(first.events, last.events, span).toFixed(1)} |`);
    out.push(`| updates/min (all policies) | ${(ratePerSecond(first.updates, last.updates, span) * 60).toFixed(2)} |`);
    out.push(`| events in total / updates in total | ${last.events} / ${last.updates} |`);
    out.push(`| dead letters | ${last.deadLetters} |`);
    for (const k of Object.keys(last.lag)) {
      const warm = samples.filter((s) => s.t >= warmupS).map((s) => s.lag[k] ?? 0);
      out.push(`| lag ${k}: max / last | ${Math.max(...warm)} / ${last.lag[k]} |`);
    }
    out.push('');
    out.push('| process | RSS warm (MB) | RSS end (MB) | peak (MB) | slope (MB/h) |');
    out.push('| --- | --- | --- | --- | --- |');
    for (const n of names) {
      const series: RssSample[] = samples.filter((s) => s.rssMb[n] !== undefined).map((s) => ({ t: s.t, rssMb: s.rssMb[n] }));
      const tr = rssTrend(series, warmupS);
      out.push(
        tr
          ? `| ${n} | ${tr.warmMb.toFixed(0)} | ${tr.endMb.toFixed(0)} | ${tr.peakMb.toFixed(0)} | ${tr.slopeMbPerHour.toFixed(1)} |`
          : `| ${n} | - | - | - | - |`,
      );
      const anon = rssTrend(
        samples.filter((s) => s.anonMb?.[n] !== undefined).map((s) => ({ t: s.t, rssMb: s.anonMb[n] })),
        warmupS,
      );
      if (anon)
        out.push(
          `| ${n}, anonymous only | ${anon.warmMb.toFixed(0)} | ${anon.endMb.toFixed(0)} | ${anon.peakMb.toFixed(0)} | ${anon.slopeMbPerHour.toFixed(1)} |`,
        );
    }
    const heap = rssTrend(
      samples.filter((s) => s.materializerHeapMb !== undefined).map((s) => ({ t: s.t, rssMb: s.materializerHeapMb as number })),
      warmupS,
    );
    if (heap)
      out.push(
        `| materializer V8 heap used | ${heap.warmMb.toFixed(0)} | ${heap.endMb.toFixed(0)} | ${heap.peakMb.toFixed(0)} | ${heap.slopeMbPerHour.toFixed(1)} |`,
      );
    const disk = rssTrend(
      samples.filter((s) => s.stateDiskMb !== undefined).map((s) => ({ t: s.t, rssMb: s.stateDiskMb as number })),
      warmupS,
    );
    if (disk)
      out.push(
        `| materializer state on disk | ${disk.warmMb.toFixed(0)} | ${disk.endMb.toFixed(0)} | ${disk.peakMb.toFixed(0)} | ${disk.slopeMbPerHour.toFixed(1)} |`,
      );
    const warmStores = samples.find((s) => s.t >= warmupS && s.storeEntries)?.storeEntries;
    const endStores = [...samples].reverse().find((s) => s.storeEntries)?.storeEntries;
    if (warmStores && endStores) {
      out.push('');
      out.push('| materializer store | entries after warm-up | entries at end |');
      out.push('| --- | ---: | ---: |');
      for (const k of Object.keys(endStores).sort()) out.push(`| ${k} | ${warmStores[k] ?? 0} | ${endStores[k]} |`);
    }
  }
  const logs = fs.readdirSync(c.runDir).filter((f) => f.endsWith('.log') && f !== 'soak-progress.log');
  const errors = logs.flatMap((f) => errorLines(path.join(c.runDir, f)).map((l) => `${f}: ${l.slice(0, 300)}`));
  out.push('');
  out.push(
    `errors: ${errors.length} error-level log lines${result.failure ? `; run failed: ${result.failure}` : ''}${samplerErrors.length ? `; sampler errors: ${samplerErrors.length} (${samplerErrors[0]})` : ''}`,
  );
  for (const e of errors.slice(0, 10)) out.push(`    ${e}`);
  const report = out.join('\n') + '\n';
  fs.writeFileSync(
    path.join(c.runDir, 'soak.json'),
    JSON.stringify({ runId: c.runId, minutes, sampleS, warmupS, samples, errors, failure: result.failure }, null, 1),
  );
  fs.writeFileSync(path.join(c.runDir, 'soak.md'), report);
  process.stdout.write(report + `samples: ${path.join(c.runDir, 'soak.json')}\n`);
  process.exitCode = result.failure ? 1 : 0;
}

main().catch((e) => {
  process.stderr.write(`soak: ${errorMessage(e)}\n`);
  process.exit(1);
});
