import type { Kafka } from 'kafkajs';
import { errorMessage, Logger } from '@srpo/core';
import { hfDirectoryHash, HfTokenizer, readHfConfig } from '@srpo/hf';
import { AgentEventsProducer, createKafka, EventCodec, topicCatalog, type TopicCatalog } from '@srpo/events';
import { PolicyPool } from '@srpo/serving';
import {
  createWorkflow,
  eventsOf,
  hfSymbolBinding,
  IDENTITY_BINDING,
  PolicySampler,
  policyShapeProblem,
  requiredSeqLen,
  setsPerPolicy,
  type SymbolBinding,
  type TaskRollouts,
  type Workflow,
} from '@srpo/workflows';
import { policiesInUse, type AgentsConfig } from './agents-config';
import { OutcomeGate } from './outcome-gate';

/** Running totals, for the stats line and for tests. */
export interface AgentsStats {
  tasks: number;
  episodes: Record<string, number>;
  successes: Record<string, number>;
  sets: Record<string, number>;
  versions: Record<string, number>;
  /** Success rate over the last {@link RECENT} episodes of each workflow. */
  recentSuccess: Record<string, number>;
  flowWaits: number;
  flowTimeouts: number;
}

const RECENT = 200;

/**
 * The production agents: play the configured workflows round-robin (G
 * rollouts of one task at a time), sample with the current policies and emit
 * every output, transition and outcome through the SDK. They see the learners
 * only through events: new weights arrive as `PolicyVersion` announcements.
 *
 * Flow control: each update consumes `setsPerUpdate` sets of a policy, so the
 * agents stop producing for a policy once they are `maxAheadUpdates` updates'
 * worth of sets ahead of its newest version, and wait for the next
 * announcement (at most `versionWaitMs`, since a learner may skip groups).
 * Without it the agents would outrun the learners and most sets would arrive
 * too stale to train on.
 */
export class AgentsService {
  private readonly log = new Logger('agents');
  private readonly kafka: Kafka;
  readonly catalog: TopicCatalog;
  private readonly sdk: AgentEventsProducer;
  readonly pool: PolicyPool;
  readonly gate?: OutcomeGate;
  private readonly workflows: Workflow[];
  /** Workflow symbols ↔ model ids: the HF tokenizer's when SRPO_MODEL_DIR is set. */
  readonly binding: SymbolBinding;
  private stopping = false;
  private loop?: Promise<void>;
  private statsTimer?: NodeJS.Timeout;
  private readonly emitted = new Map<string, number>();
  private readonly startVersion = new Map<string, number>();
  readonly stats: AgentsStats = { tasks: 0, episodes: {}, successes: {}, sets: {}, versions: {}, recentSuccess: {}, flowWaits: 0, flowTimeouts: 0 };
  private readonly recent = new Map<string, boolean[]>();

  constructor(private readonly config: AgentsConfig) {
    this.kafka = createKafka(config.kafka);
    this.catalog = topicCatalog(config.topics);
    const codec = new EventCodec();
    this.sdk = new AgentEventsProducer({ kafka: this.kafka, codec, topics: this.catalog });
    const dir = config.modelDir;
    const seqLen = requiredSeqLen(config);
    const base = dir ? { dir, hash: hfDirectoryHash(dir) } : undefined;
    this.binding = dir ? hfSymbolBinding(HfTokenizer.fromDirectory(dir), readHfConfig(dir).vocabSize) : IDENTITY_BINDING;
    this.pool = new PolicyPool({
      kafka: this.kafka,
      catalog: this.catalog,
      codec,
      rolePolicies: config.rolePolicies,
      checkpointDir: config.checkpointDir,
      accept: (policy) => policyShapeProblem(policy, seqLen, base),
      startupTimeoutMs: config.startupTimeoutMs,
    });
    if (config.outcomeGate.enabled) {
      this.gate = new OutcomeGate({
        kafka: this.kafka,
        groupId: config.outcomeGate.groupId,
        transitionsTopic: this.catalog.transitions.name,
        pollMs: 100,
        timeoutMs: config.outcomeGate.timeoutMs,
      });
    }
    this.workflows = config.workflows.map((w) => createWorkflow(w, { arithmetic: config.arithmetic, search: config.search }, config.seed));
  }

  async start(): Promise<void> {
    await this.pool.start();
    await this.sdk.connect();
    await this.gate?.start();
    for (const id of policiesInUse(this.config)) {
      this.emitted.set(id, 0);
      this.startVersion.set(id, this.pool.versions()[id]);
    }
    this.log.info('agents running', {
      runId: this.config.runId,
      workflows: this.config.workflows,
      rolePolicies: this.config.rolePolicies,
      versions: this.pool.versions(),
      groupSize: this.config.groupSize,
      ...(this.config.modelDir ? { modelDir: this.config.modelDir, symbols: this.binding.describe() } : {}),
    });
    this.statsTimer = setInterval(() => this.logStats(), this.config.statsIntervalMs);
    this.loop = this.run();
  }

  /** Resolves when the loop ends by itself (maxTasks reached) or after {@link stop}. */
  async done(): Promise<void> {
    await this.loop;
  }

  /** Finishes the task in flight (its events are sent), then disconnects. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop?.catch(() => undefined);
    if (this.statsTimer) clearInterval(this.statsTimer);
    // Held outcomes go out before the producer closes: nothing the agents played is lost.
    await this.gate?.stop();
    this.logStats();
    await this.sdk.disconnect().catch((e) => this.log.warn('producer disconnect failed', { error: errorMessage(e) }));
    await this.pool.stop();
  }

  private async run(): Promise<void> {
    const sampler = new PolicySampler(this.pool.registry, { seed: this.config.seed + 1, temperature: this.config.temperature, binding: this.binding });
    for (let task = 0; !this.stopping && (this.config.maxTasks === 0 || task < this.config.maxTasks); task++) {
      const wf = this.workflows[task % this.workflows.length];
      await this.waitForBudget(wf);
      if (this.stopping) break;
      const changed = this.pool.applyPending();
      if (changed.length > 0) this.log.debug('new weights in use', { policies: changed, versions: this.pool.versions() });
      const rollouts = await wf.play(`${this.config.runId}-${wf.name}-${task}`, this.config.groupSize, sampler);
      await this.emit(rollouts);
      this.count(rollouts);
    }
  }

  /** Waits while any policy of `wf` is too far ahead of its learner. */
  private async waitForBudget(wf: Workflow): Promise<void> {
    const { maxAheadUpdates, setsPerUpdate, versionWaitMs } = this.config;
    if (maxAheadUpdates === 0) return;
    const ids = [...new Set(wf.roles.map((r) => this.config.rolePolicies[r] as string))];
    const ahead = () =>
      ids.filter((id) => {
        const consumed = (this.pool.announcedVersion(id) - (this.startVersion.get(id) ?? 0)) * setsPerUpdate;
        return (this.emitted.get(id) ?? 0) - consumed >= maxAheadUpdates * setsPerUpdate;
      });
    let blocked = ahead();
    if (blocked.length === 0) return;
    this.stats.flowWaits++;
    const deadline = Date.now() + versionWaitMs;
    while (blocked.length > 0 && !this.stopping) {
      const left = deadline - Date.now();
      if (left <= 0) {
        this.stats.flowTimeouts++;
        // The learner consumed fewer sets than counted (skipped groups): forgive the difference.
        for (const id of blocked) {
          const consumed = (this.pool.announcedVersion(id) - (this.startVersion.get(id) ?? 0)) * setsPerUpdate;
          this.emitted.set(id, consumed + (maxAheadUpdates - 1) * setsPerUpdate);
        }
        this.log.warn('no new policy version in time; producing anyway', { policies: blocked, waitedMs: versionWaitMs });
        return;
      }
      await this.pool.waitForAnnouncement(Math.min(left, 1000));
      blocked = ahead();
    }
  }

  private async emit(r: TaskRollouts): Promise<void> {
    const { body, outcomes } = eventsOf(r, Date.now(), this.binding);
    const written = await this.sdk.emitBatch(body);
    if (this.gate) {
      const partitions = [...new Set(written.filter((m) => m.topicName === this.catalog.transitions.name).map((m) => m.partition))];
      const targets = await this.gate.endOffsets(partitions);
      this.gate.hold(targets, async () => {
        await this.sdk.emitBatch(outcomes);
      });
    } else {
      await this.sdk.emitBatch(outcomes);
    }
    for (const [id, n] of setsPerPolicy(r)) this.emitted.set(id, (this.emitted.get(id) ?? 0) + n);
  }

  private count(r: TaskRollouts): void {
    const s = this.stats;
    s.tasks++;
    s.episodes[r.workflow] = (s.episodes[r.workflow] ?? 0) + r.episodes.length;
    s.successes[r.workflow] = (s.successes[r.workflow] ?? 0) + r.episodes.filter((e) => e.outcome.success).length;
    for (const [id, n] of setsPerPolicy(r)) s.sets[id] = (s.sets[id] ?? 0) + n;
    const recent = this.recent.get(r.workflow) ?? [];
    recent.push(...r.episodes.map((e) => e.outcome.success));
    recent.splice(0, Math.max(0, recent.length - RECENT));
    this.recent.set(r.workflow, recent);
    s.recentSuccess[r.workflow] = recent.filter(Boolean).length / recent.length;
    s.versions = this.pool.versions();
  }

  private logStats(): void {
    this.log.info('agents stats', {
      ...this.stats,
      swaps: Object.fromEntries(this.pool.swaps),
      outcomesHeld: this.gate?.size ?? 0,
      outcomesReleased: this.gate?.released,
    });
  }
}
