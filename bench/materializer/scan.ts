/**
 * Cost of the set stage's deadline scan with many retained episodes, in process (no Kafka):
 * N episodes are completed and closed, then stream time advances past several scan intervals
 * while they are all still inside the dedupe window, and each scan is timed.
 *
 *   npm run build:bench && node dist-bench/bench/materializer/scan.js [--episodes 100000] [--scans 5]
 */
import { EventCodec, topicCatalog } from '@srpo/events';
import { ProcessorHarness } from '@srpo/streams';
import { ActiveSetProcessor, ActiveSetStores } from '@srpo/materializer';
import { output, transition } from '@srpo/testing';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

function main(): void {
  const episodes = arg('episodes', 100_000);
  const scans = arg('scans', 5);
  const topics = topicCatalog({ prefix: 'bench.' });
  const codec = new EventCodec();
  const h = new ProcessorHarness<ActiveSetStores>(new ActiveSetProcessor({ topics, codec, scanIntervalMs: 1_000 }));
  const t0 = 1_000_000;
  for (let e = 0; e < episodes; e++) {
    const id = `ep${e}`;
    const t = t0 + e;
    h.feed(h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: output(id, 0, { eventTimeMs: t, startedAtMs: t }) }, id, codec));
    h.feed(h.record(topics.transitions.name, { type: 'Transition', value: transition(id, [0], { eventTimeMs: t, reward: 1 }) }, id, codec));
  }
  const times: number[] = [];
  for (let i = 1; i <= scans; i++) {
    const start = process.hrtime.bigint();
    h.advanceTo(t0 + episodes + 2_000 * i);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  const sorted = [...times].sort((a, b) => a - b);
  console.log(
    `${episodes} retained episodes (${h.stores.episodes.size} kept), ${scans} scans: ${times.map((t) => t.toFixed(2)).join(', ')} ms (median ${sorted[Math.floor(scans / 2)].toFixed(2)} ms)`,
  );
  // Past the 10-minute dedupe window every episode expires, in one scan.
  const start = process.hrtime.bigint();
  h.advanceTo(t0 + episodes + 600_000 + 2_000 * (scans + 1));
  console.log(`expiry scan: ${(Number(process.hrtime.bigint() - start) / 1e6).toFixed(1)} ms, ${h.stores.episodes.size} episodes kept`);
}

main();
