import { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Kafka } from 'kafkajs';
import { AgentEvent, AgentEventsProducer, createKafka, ensureTopics, topicCatalog, TopicCatalog } from '@srpo/events';
import { ensureKafka, output, sleep, spawnApp, transition, uniquePrefix, verifyExactlyOnce, waitForExit } from '@srpo/testing';

const GROUP_SIZE = 4;

/** Episodes with 1-4 workers each and one transition with an immediate reward; groups of 4 by declared key. */
function workload(episodes: number, baseTime: number): { events: AgentEvent[]; setIds: string[] } {
  const events: AgentEvent[] = [];
  const setIds: string[] = [];
  for (let e = 0; e < episodes; e++) {
    const id = `ep${e}`;
    const k = 1 + (e % 4);
    const time = baseTime + e;
    for (let j = 0; j < k; j++) events.push({ type: 'AgentOutput', value: output(id, j, { eventTimeMs: time, startedAtMs: time }) });
    events.push({
      type: 'Transition',
      value: transition(id, [...Array(k).keys()], {
        groupKey: `task-${Math.floor(e / GROUP_SIZE)}`,
        expectedGroupSize: GROUP_SIZE,
        reward: (e * 7) % 3 === 0 ? 1 : 0,
        eventTimeMs: time,
      }),
    });
    setIds.push(`${id}/t0`);
  }
  return { events, setIds };
}

async function produce(sdk: AgentEventsProducer, events: AgentEvent[], chunk = 500): Promise<void> {
  for (let i = 0; i < events.length; i += chunk) await sdk.emitBatch(events.slice(i, i + chunk));
}

describe('materializer exactly-once under failures (real broker, real processes)', () => {
  const brokers = ensureKafka();
  let kafka: Kafka;
  const logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-crash-'));
  // Every process a test starts is killed at the end, also when an assertion failed midway.
  const started: ChildProcess[] = [];
  const spawn = (env: Record<string, string>, log: string): ChildProcess => {
    const child = spawnApp('materializer', env, log);
    started.push(child);
    return child;
  };
  afterAll(() => {
    for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  beforeAll(() => {
    kafka = createKafka({ brokers, clientId: 'crash-test' });
  });

  async function setup(label: string): Promise<{ catalog: TopicCatalog; env: Record<string, string>; sdk: AgentEventsProducer }> {
    const prefix = uniquePrefix(label);
    const catalog = topicCatalog({ prefix, rawPartitions: 4, derivedPartitions: 2 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const env = {
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_RAW_PARTITIONS: '4',
      SRPO_DERIVED_PARTITIONS: '2',
      SRPO_SESSION_TIMEOUT_MS: '6000',
      SRPO_LOG_LEVEL: 'warn',
    };
    return { catalog, env, sdk: new AgentEventsProducer({ kafka, topics: catalog }) };
  }

  async function waitForGroups(catalog: TopicCatalog, expected: number, timeoutMs: number): Promise<void> {
    const admin = kafka.admin();
    await admin.connect();
    const deadline = Date.now() + timeoutMs;
    try {
      while (Date.now() < deadline) {
        // Each committed group adds one record and one commit marker per transaction at most;
        // count records precisely once the end offsets suggest we are close.
        const offsets = await admin.fetchTopicOffsets(catalog.advantageGroups.name);
        const high = offsets.reduce((a, o) => a + Number(o.high), 0);
        if (high >= expected) {
          const report = await verifyExactlyOnce(kafka, catalog, [], 10_000).catch(() => undefined);
          if (report && report.groups >= expected) return;
        }
        await sleep(2000);
      }
    } finally {
      await admin.disconnect();
    }
    throw new Error(`fewer than ${expected} groups after ${timeoutMs} ms`);
  }

  it('loses and duplicates nothing while the materializer is SIGKILLed 10 times mid-stream', async () => {
    const { catalog, env, sdk } = await setup('crash');
    const { events, setIds } = workload(6000, 1_700_000_000_000);
    expect(events.length).toBeGreaterThanOrEqual(20_000);
    const log = path.join(logDir, 'crash.log');
    let child: ChildProcess = spawn(env, log);
    let kills = 0;
    const killer = (async () => {
      // Random kill points while events are still flowing and while the backlog drains.
      for (let i = 0; i < 10; i++) {
        await sleep(1500 + Math.floor(Math.random() * 2500));
        child.kill('SIGKILL');
        await waitForExit(child);
        kills++;
        child = spawn(env, log);
      }
    })();
    // Events keep flowing for the whole kill window, so kills land mid-stream.
    const chunks = 24;
    const size = Math.ceil(events.length / chunks);
    for (let i = 0; i < chunks; i++) {
      await produce(sdk, events.slice(i * size, (i + 1) * size));
      await sleep(1000);
    }
    await killer;
    expect(kills).toBe(10);
    await waitForGroups(catalog, setIds.length / GROUP_SIZE, 240_000);
    const report = await verifyExactlyOnce(kafka, catalog, setIds);
    child.kill('SIGTERM');
    await waitForExit(child);
    await sdk.disconnect();
    expect(report.openTransactions).toEqual([]);
    expect(report.missingSets).toEqual([]);
    expect(report.duplicateSets).toEqual([]);
    expect(report.setsOnRepartitionTopic).toBe(setIds.length);
    expect(report.multiplyGroupedSets).toEqual([]);
    expect(report.ungroupedSets).toEqual([]);
    expect(report.duplicateGroups).toEqual([]);
    expect(report.groups).toBe(setIds.length / GROUP_SIZE);
    expect(report.invalidSets).toEqual([]);
  }, 420_000);

  it('two instances in one group, one stopped mid-stream: same guarantees', async () => {
    const { catalog, env, sdk } = await setup('pair');
    const { events, setIds } = workload(2400, 1_700_000_000_000);
    const log = path.join(logDir, 'pair.log');
    const a = spawn(env, log);
    const b = spawn(env, log);
    await produce(sdk, events.slice(0, events.length / 2));
    await sleep(4000);
    b.kill('SIGTERM');
    expect(await waitForExit(b)).toBe(0);
    await produce(sdk, events.slice(events.length / 2));
    await waitForGroups(catalog, setIds.length / GROUP_SIZE, 180_000);
    const report = await verifyExactlyOnce(kafka, catalog, setIds);
    a.kill('SIGTERM');
    await waitForExit(a);
    await sdk.disconnect();
    expect(report.openTransactions).toEqual([]);
    expect(report.missingSets).toEqual([]);
    expect(report.duplicateSets).toEqual([]);
    expect(report.multiplyGroupedSets).toEqual([]);
    expect(report.ungroupedSets).toEqual([]);
    expect(report.groups).toBe(setIds.length / GROUP_SIZE);
  }, 300_000);

  /** Lines of a JSON log with the given message. */
  function logLines(log: string, msg: string): Record<string, unknown>[] {
    return fs
      .readFileSync(log, 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === msg);
  }

  function expectExactlyOnce(report: Awaited<ReturnType<typeof verifyExactlyOnce>>, setIds: string[]): void {
    expect(report.openTransactions).toEqual([]);
    expect(report.missingSets).toEqual([]);
    expect(report.duplicateSets).toEqual([]);
    expect(report.multiplyGroupedSets).toEqual([]);
    expect(report.ungroupedSets).toEqual([]);
    expect(report.duplicateGroups).toEqual([]);
    expect(report.groups).toBe(setIds.length / GROUP_SIZE);
    expect(report.invalidSets).toEqual([]);
  }

  it('killed inside local state writes (after the Kafka commit, before the local one) 6 times: restores from the copy and the changelog tail, exactly once', async () => {
    const { catalog, env, sdk } = await setup('flushkill');
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-flushkill-state-'));
    const { events, setIds } = workload(2400, 1_700_000_000_000);
    const log = path.join(logDir, 'flushkill.log');
    // Small transactions, so there are many local writes to cut short.
    const base = { ...env, SRPO_STATE_DIR: stateDir, SRPO_RECORDS_PER_TRANSACTION: '50', SRPO_LOG_LEVEL: 'info' };
    const producing = produce(sdk, events, 200);
    let selfKills = 0;
    for (let i = 0; i < 6; i++) {
      const child = spawn({ ...base, SRPO_FAULT_KILL_AT_LOCAL_WRITE: String(5 + Math.floor(Math.random() * 30)) }, log);
      await waitForExit(child);
      expect(child.signalCode).toBe('SIGKILL');
      selfKills++;
    }
    await producing;
    const last = spawn(base, log);
    await waitForGroups(catalog, setIds.length / GROUP_SIZE, 180_000);
    const report = await verifyExactlyOnce(kafka, catalog, setIds);
    last.kill('SIGTERM');
    await waitForExit(last);
    await sdk.disconnect();
    expect(selfKills).toBe(6);
    expect(logLines(log, 'SRPO_FAULT_KILL_AT_LOCAL_WRITE reached: killing the process inside a local state write')).toHaveLength(6);
    // Every restart after the first used the copy: none fell back to the whole changelog.
    const ready = logLines(log, 'task ready');
    expect(ready.length).toBeGreaterThanOrEqual(7 * 2);
    expect(logLines(log, 'local state not used; restoring from the whole changelog').map((l) => l.reason)).toEqual(expect.arrayContaining(['no local state']));
    expect(logLines(log, 'local state not used; restoring from the whole changelog').every((l) => l.reason === 'no local state')).toBe(true);
    expectExactlyOnce(report, setIds);
  }, 300_000);

  it('its local state deleted between runs: restores from the whole changelog, exactly once; kept, it reads only the tail', async () => {
    const { catalog, env, sdk } = await setup('statedel');
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-statedel-state-'));
    const { events, setIds } = workload(2000, 1_700_000_000_000);
    const log = path.join(logDir, 'statedel.log');
    const base = { ...env, SRPO_STATE_DIR: stateDir, SRPO_LOG_LEVEL: 'info' };
    const third = Math.floor(events.length / 3);
    const run = async (slice: AgentEvent[]) => {
      const child = spawn(base, log);
      await produce(sdk, slice);
      await sleep(5000);
      child.kill('SIGTERM');
      expect(await waitForExit(child)).toBe(0);
    };
    await run(events.slice(0, third));
    // Kept: the second start restores from the copy, reading no more of the changelog than the tail.
    const firstReady = logLines(log, 'task ready').length;
    await run(events.slice(third, 2 * third));
    const secondStart = logLines(log, 'task ready').slice(firstReady);
    expect(secondStart.length).toBeGreaterThan(0);
    expect(secondStart.every((l) => l.local === true && l.restoredRecords === 0)).toBe(true);
    fs.rmSync(stateDir, { recursive: true, force: true });
    const notUsedBefore = logLines(log, 'local state not used; restoring from the whole changelog').length;
    const readyBefore = logLines(log, 'task ready').length;
    const last = spawn(base, log);
    await produce(sdk, events.slice(2 * third));
    await waitForGroups(catalog, setIds.length / GROUP_SIZE, 180_000);
    const report = await verifyExactlyOnce(kafka, catalog, setIds);
    last.kill('SIGTERM');
    await waitForExit(last);
    await sdk.disconnect();
    const fallback = logLines(log, 'local state not used; restoring from the whole changelog').slice(notUsedBefore);
    expect(fallback.length).toBeGreaterThan(0);
    expect(fallback.every((l) => l.reason === 'no local state')).toBe(true);
    // Without the copy, the changelog is read whole: the restarted tasks restored records.
    const restored = logLines(log, 'task ready')
      .slice(readyBefore)
      .reduce((n, l) => n + Number(l.restoredRecords), 0);
    expect(restored).toBeGreaterThan(0);
    expectExactlyOnce(report, setIds);
  }, 300_000);
});
