import { ChildProcess, execFileSync, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import {
  createKafka,
  ensureTopics,
  EventCodec,
  readTopicsToEnd,
  topicCatalog,
  validateAgentOutput,
  validateEpisodeOutcome,
  validateTransition,
} from '@srpo/events';
import { ensureKafka, sleep, spawnApp, uniquePrefix, waitForExit } from '@srpo/testing';

const SCRIPT = path.join(repoRoot(), 'examples', 'python', 'srpo_producer.py');
const TASKS = 3;
const G = 4;
const K = 2;

function python(args: string[], env: Record<string, string> = {}): string {
  const r = spawnSync('python3', [SCRIPT, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
  if (r.status !== 0) {
    throw new Error(
      `python3 ${path.relative(repoRoot(), SCRIPT)} failed (${r.status}): ${r.stderr}\n` +
        'Install its requirements with: python3 -m pip install -r examples/python/requirements.txt',
    );
  }
  return r.stdout;
}

/** SIGTERM, then SIGKILL after 10 s. */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await waitForExit(child).finally(() => clearTimeout(timer));
}

/**
 * The Python example producer against the real broker and the real
 * materializer: its events decode with the TypeScript codec, pass the SDK's
 * validators, and come out as complete active sets and advantage groups, with
 * nothing dead-lettered. The materializer is the built app (`dist/apps/materializer`,
 * from `npm run build`) run as a process: apps are leaves, so this test does not
 * import it.
 */
describe('Python producer example (fastavro + confluent-kafka)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'python-example-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('py');
  const catalog = topicCatalog({ prefix, rawPartitions: 2, derivedPartitions: 1 });
  const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-python-producer-')), 'materializer.log');
  let materializer: ChildProcess | undefined;

  beforeAll(async () => {
    // Fail loudly, with the fix, when the requirements are missing: CI must not skip this.
    execFileSync('python3', ['-c', 'import fastavro, confluent_kafka'], { stdio: 'pipe' });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    // Its consumer groups read from the beginning, so events produced before it joins are not missed.
    materializer = spawnApp(
      'materializer',
      {
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_RAW_PARTITIONS: '2',
        SRPO_DERIVED_PARTITIONS: '1',
        SRPO_LOG_LEVEL: 'warn',
      },
      log,
    );
  }, 60_000);

  afterAll(async () => {
    if (materializer) await stop(materializer);
  });

  it('uses the same CRC-64-AVRO fingerprints as the TypeScript codec', () => {
    const fps = JSON.parse(python(['--print-fingerprints'])) as Record<string, string>;
    for (const type of ['AgentOutput', 'Transition', 'EpisodeOutcome'] as const) {
      expect(fps[type]).toBe(codec.schemas.reader(type).fingerprintHex);
    }
  });

  it('produces events the materializer turns into complete sets of K = 2 and groups of size G, nothing dead-lettered', async () => {
    const out = JSON.parse(
      python(['--brokers', brokers.join(','), '--prefix', prefix, '--tasks', String(TASKS), '--group-size', String(G), '--workers', String(K)]),
    ) as { produced: Record<string, number> };
    expect(out.produced).toEqual({ AgentOutput: TASKS * G * K, Transition: TASKS * G, EpisodeOutcome: TASKS * G });

    // The raw bytes decode with the TypeScript codec (single-object header included) and pass the SDK validators.
    const raw = await readTopicsToEnd(kafka, [catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name]);
    expect(raw).toHaveLength(TASKS * G * (K + 2));
    for (const r of raw) {
      expect(r.value?.subarray(0, 2)).toEqual(Buffer.from([0xc3, 0x01]));
      let episodeId: string;
      if (r.topic === catalog.agentOutputs.name) {
        const o = codec.decodeAs('AgentOutput', r.value);
        validateAgentOutput(o);
        episodeId = o.episodeId;
      } else if (r.topic === catalog.transitions.name) {
        const t = codec.decodeAs('Transition', r.value);
        validateTransition(t);
        episodeId = t.episodeId;
      } else {
        const o = codec.decodeAs('EpisodeOutcome', r.value);
        validateEpisodeOutcome(o);
        episodeId = o.episodeId;
      }
      // Keyed by episode id, and co-partitioned: every event of an episode in one partition number.
      expect(r.key?.toString()).toBe(episodeId);
    }
    const partitionOf = new Map<string, Set<number>>();
    for (const r of raw) partitionOf.set(r.key?.toString() ?? '', (partitionOf.get(r.key?.toString() ?? '') ?? new Set()).add(r.partition));
    for (const parts of partitionOf.values()) expect(parts.size).toBe(1);

    let groups: ReturnType<typeof codec.decodeAs<'AdvantageGroup'>>[] = [];
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      groups = (await readTopicsToEnd(kafka, [catalog.advantageGroups.name])).map((r) => codec.decodeAs('AdvantageGroup', r.value));
      if (groups.length >= TASKS) break;
      await sleep(500);
    }
    if (groups.length < TASKS) {
      const exited = materializer && materializer.exitCode !== null ? ` (materializer exited with ${materializer.exitCode})` : '';
      throw new Error(
        `${groups.length} of ${TASKS} advantage groups after 60 s${exited}; materializer log ${log}:\n${fs.readFileSync(log, 'utf8').slice(-4000)}`,
      );
    }
    expect(groups).toHaveLength(TASKS);
    for (const g of groups) {
      expect(g.policyId).toBe('python-agents');
      expect(g.closeReason).toBe('SIZE');
      expect(g.sets).toHaveLength(G);
      for (const s of g.sets) {
        expect(s.set.status).toBe('COMPLETE');
        expect(s.set.members).toHaveLength(K);
        expect(s.set.workflowKind).toBe('JOINT');
        expect(s.set.rewardSource).toBe('IMMEDIATE');
      }
    }
    const sets = await readTopicsToEnd(kafka, [catalog.activeSets.name]);
    expect(sets).toHaveLength(TASKS * G);
    expect(await readTopicsToEnd(kafka, [catalog.deadLetter.name, catalog.invalidSets.name])).toHaveLength(0);
  }, 120_000);
});
