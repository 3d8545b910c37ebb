import { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { AgentEventsProducer, createKafka, ensureTopics, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { ensureKafka, groupedEpisodes, sleep, spawnApp, uniquePrefix, verifyExactlyOnce, waitForExit } from '@srpo/testing';

const EPISODES = 360;
const GROUP = 3;
const RAW_PARTITIONS = 6;

/** The partitions an instance's sets stage holds, from its log's latest `assignment` line. */
function assigned(log: string): number[] | undefined {
  const lines = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n') : [];
  for (let i = lines.length - 1; i >= 0; i--) {
    if (!lines[i].includes('"msg":"assignment"') || !lines[i].includes('.sets"')) continue;
    return (JSON.parse(lines[i]) as { partitions: number[] }).partitions;
  }
  return undefined;
}

/**
 * Materializer instances sharing the work (docs/reliability.md): three processes on one consumer
 * group per stage split the six raw partitions (partition p of the three raw topics always
 * together), a fourth joins mid-run and one of the first three is SIGKILLed. Every set is emitted
 * once and grouped once; the rebalance times are reported.
 */
describe('materializer instances sharing partitions: one joins, one is killed', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-sharding-'));
  const children: ChildProcess[] = [];

  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    await Promise.all(children.map((c) => waitForExit(c).catch(() => undefined)));
  });

  it('splits the partitions, takes the killed instance’s over, and emits every set and group once', async () => {
    const brokers = ensureKafka();
    const prefix = uniquePrefix('shard');
    const catalog = topicCatalog({ prefix, rawPartitions: RAW_PARTITIONS, derivedPartitions: 3 });
    const kafka = createKafka({ brokers, clientId: 'sharding-test' });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const logs: string[] = [];
    const start = (n: number) => {
      const log = path.join(dir, `materializer-${n}.log`);
      logs.push(log);
      children.push(
        spawnApp(
          'materializer',
          {
            KAFKA_BROKERS: brokers.join(','),
            SRPO_TOPIC_PREFIX: prefix,
            SRPO_RAW_PARTITIONS: String(RAW_PARTITIONS),
            SRPO_DERIVED_PARTITIONS: '3',
            SRPO_SESSION_TIMEOUT_MS: '6000',
            SRPO_STATE_DIR: path.join(dir, `state-${n}`),
            SRPO_LOG_LEVEL: 'info',
          },
          log,
        ),
      );
    };
    for (const n of [0, 1, 2]) start(n);
    // Three instances: each holds two raw partitions.
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && ![0, 1, 2].every((n) => assigned(logs[n])?.length === 2)) await sleep(250);
    const split = [0, 1, 2].map((n) => assigned(logs[n]) ?? []);
    expect(split.flat().sort()).toEqual([0, 1, 2, 3, 4, 5]);

    const { events, setIds } = groupedEpisodes('s', EPISODES, GROUP);
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    const figures: Record<string, number> = {};
    const chunk = 24;
    for (let i = 0; i < events.length; i += chunk) {
      await sdk.emitBatch(events.slice(i, i + chunk));
      if (i === chunk * 5) {
        const joinedAt = Date.now();
        start(3);
        while (Date.now() < joinedAt + 60_000 && !(assigned(logs[3])?.length ?? 0)) await sleep(100);
        figures.joinRebalanceMs = Date.now() - joinedAt;
      }
      if (i === chunk * 15) {
        const killedAt = Date.now();
        const victim = children[1];
        victim.kill('SIGKILL');
        await waitForExit(victim);
        const others = [0, 2, 3];
        // Until the survivors hold all six partitions again (the session timeout, then the rebalance).
        while (Date.now() < killedAt + 60_000 && others.map((n) => assigned(logs[n]) ?? []).flat().length !== RAW_PARTITIONS) await sleep(100);
        figures.killRebalanceMs = Date.now() - killedAt;
      }
      await sleep(100);
    }
    await sdk.disconnect();
    const producedAt = Date.now();
    const groups = EPISODES / GROUP;
    const until = Date.now() + 120_000;
    while (Date.now() < until && (await readTopicsToEnd(kafka, [catalog.advantageGroups.name])).length < groups) await sleep(500);
    figures.lastGroupAfterProducedMs = Date.now() - producedAt;

    const report = await verifyExactlyOnce(kafka, catalog, setIds);
    expect(report.openTransactions).toEqual([]);
    expect(report.missingSets).toEqual([]);
    expect(report.duplicateSets).toEqual([]);
    expect(report.multiplyGroupedSets).toEqual([]);
    expect(report.ungroupedSets).toEqual([]);
    expect(report.groups).toBe(groups);
    // The survivors hold every partition once between them.
    expect(
      [0, 2, 3]
        .map((n) => assigned(logs[n]) ?? [])
        .flat()
        .sort(),
    ).toEqual([0, 1, 2, 3, 4, 5]);
    process.stdout.write(
      `${JSON.stringify({ instances: '3 -> 4 -> 3', episodes: EPISODES, sets: setIds.length, groups, lost: report.missingSets.length, duplicated: report.duplicateSets.length + report.multiplyGroupedSets.length, ...figures })}\n`,
    );
  }, 300_000);
});
