import { randomUUID } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import type { Consumer, Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, Logger, SrpoError } from '@srpo/core';
import { EventCodec, readTopicsToEnd, type PolicyVersion, type TopicCatalog } from '@srpo/events';
import { CheckpointStore, loadCheckpoint, Policy, PolicyRegistry } from '@srpo/policy';
// A Hugging Face policy's checkpoint loads through the hf-llama family @srpo/hf registers.
import { isLlamaModel, type LlamaModel } from '@srpo/hf';
import { checkpointDirInStore, checkpointDirOf } from './checkpoint-location';

export interface PolicyPoolOptions {
  kafka: Kafka;
  catalog: TopicCatalog;
  codec?: EventCodec;
  /** role → policy id: the policies followed, and the roles the registry maps to them. */
  rolePolicies: Readonly<Record<string, string>>;
  /** The learners' checkpoint root: where version 0 is found before any version is announced. */
  checkpointDir: string;
  /**
   * Load announced checkpoints only from inside `checkpointDir` (after `..` and symbolic links):
   * an announcement naming anything else is refused with a warning and counted
   * ({@link PolicyPool.refusedCheckpoints}), and the current version goes on serving. Default false.
   */
  confineToCheckpointDir?: boolean;
  /** Why a loaded policy cannot be used (it is then refused, never swapped in), or undefined when it can. */
  accept?: (policy: Policy) => string | undefined;
  /**
   * Takes a policy that a newer version replaced, instead of disposing it at once: a server
   * whose requests still generate with it disposes it once they end.
   */
  retire?: (old: Policy) => void;
  startupTimeoutMs: number;
  /**
   * Keep one copy of each LoRA policy's base: every loaded LoRA version becomes a view of the
   * base already held ({@link LlamaModel.adapterView}, same variables) with its own adapter,
   * instead of a model with a base of its own. Memory is then one base plus an adapter per
   * version alive. Default false.
   */
  shareLoraBases?: boolean;
  logger?: Logger;
}

/**
 * The policies a sampler (the agents, `srpo serve`) samples with, kept current from the
 * policy-versions topic. It knows the learners only through events: a `PolicyVersion`
 * names a checkpoint (a `file://` directory by default), which is loaded and
 * verified against the announced weights hash in the background; the new
 * weights are swapped in at the next {@link applyPending} (between tasks, never
 * under a running sample). Version 0 comes from the checkpoint store (the
 * learner writes it at start and announces only updates).
 */
export class PolicyPool {
  readonly registry = new PolicyRegistry();
  private readonly log: Logger;
  private readonly codec: EventCodec;
  private readonly policyIds: string[];
  private readonly pending = new Map<string, Policy>();
  /** Newest version announced per policy (loaded or not). */
  private readonly announced = new Map<string, PolicyVersion>();
  private readonly loading = new Map<string, Promise<void>>();
  private readonly waiters = new Set<() => void>();
  private consumer?: Consumer;
  private stopped = false;
  /** Versions loaded and swapped in, per policy, since start. */
  readonly swaps = new Map<string, number>();
  private refused = 0;
  /** Shared LoRA bases by the hash of their directory ({@link PolicyPoolOptions.shareLoraBases}). */
  private readonly bases = new Map<string, LlamaModel>();

  constructor(private readonly options: PolicyPoolOptions) {
    this.log = options.logger ?? new Logger('policy-pool');
    this.codec = options.codec ?? new EventCodec();
    this.policyIds = [...new Set(Object.values(options.rolePolicies))].sort();
  }

  /** Loads the newest announced version of every policy (or version 0), then follows the topic. */
  async start(): Promise<void> {
    const topic = this.options.catalog.policyVersions.name;
    let announced;
    try {
      announced = await readTopicsToEnd(this.options.kafka, [topic]);
    } catch (e) {
      throw new SrpoError(
        ErrorCode.UNAVAILABLE,
        `cannot read ${topic} (${errorMessage(e)}); is the broker up and the topic catalog created (npx srpo events topics with the same SRPO_TOPIC_PREFIX)?`,
        { cause: e },
      );
    }
    for (const r of announced) this.note(this.decode(r.value));
    for (const id of this.policyIds) {
      const v = this.announced.get(id);
      const policy = v ? await this.loadAnnounced(v) : await this.loadInitial(id);
      this.registry.add(policy);
      this.swaps.set(id, 0);
      this.log.info('policy loaded', { policyId: id, version: policy.version });
    }
    for (const [role, id] of Object.entries(this.options.rolePolicies)) this.registry.assignRole(role, id);
    const consumer = this.options.kafka.consumer({ groupId: `srpo-agents-versions-${randomUUID()}`, maxWaitTimeInMs: 100, readUncommitted: false });
    this.consumer = consumer;
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        const v = this.decode(message.value);
        if (this.note(v)) this.scheduleLoad(v.policyId);
      },
    });
  }

  /** Swaps in every verified version loaded since the last call; returns the policies that changed. */
  applyPending(): string[] {
    const changed: string[] = [];
    for (const [id, policy] of this.pending) {
      const current = this.registry.get(id);
      if (policy.version <= current.version) {
        policy.dispose();
      } else {
        const old = this.registry.get(id);
        this.registry.replace(policy, { disposeOld: !this.options.retire });
        this.options.retire?.(old);
        this.swaps.set(id, (this.swaps.get(id) ?? 0) + 1);
        changed.push(id);
      }
    }
    this.pending.clear();
    return changed;
  }

  /** Announcements refused because their checkpoint lies outside the store ({@link PolicyPoolOptions.confineToCheckpointDir}). */
  get refusedCheckpoints(): number {
    return this.refused;
  }

  /** Current (swapped-in) version of each policy. */
  versions(): Record<string, number> {
    return Object.fromEntries(this.policyIds.map((id) => [id, this.registry.get(id).version]));
  }

  /** Newest announced version of a policy (maybe not loaded yet), or the current one. */
  announcedVersion(policyId: string): number {
    return Math.max(this.announced.get(policyId)?.version ?? 0, this.registry.has(policyId) ? this.registry.get(policyId).version : 0);
  }

  /** Resolves when any new version is announced, or after `timeoutMs`; true if one was. */
  waitForAnnouncement(timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      let done = false;
      const finish = (v: boolean) => {
        if (done) return;
        done = true;
        this.waiters.delete(wake);
        clearTimeout(timer);
        resolve(v);
      };
      const wake = () => finish(true);
      const timer = setTimeout(() => finish(false), timeoutMs);
      this.waiters.add(wake);
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.consumer?.disconnect().catch((e) => this.log.warn('version consumer disconnect failed', { error: errorMessage(e) }));
    await Promise.allSettled([...this.loading.values()]);
    for (const p of this.pending.values()) p.dispose();
    this.pending.clear();
    this.registry.dispose();
    for (const b of this.bases.values()) b.dispose();
    this.bases.clear();
    for (const w of [...this.waiters]) w();
  }

  private decode(value: Buffer | null): PolicyVersion {
    return this.codec.decodeAs('PolicyVersion', value);
  }

  /** Records an announcement; true when it is newer than anything known for a policy this pool serves. */
  private note(v: PolicyVersion): boolean {
    if (!this.policyIds.includes(v.policyId)) return false;
    const prev = this.announced.get(v.policyId);
    if (prev && prev.version >= v.version) return false;
    if (this.options.confineToCheckpointDir) {
      try {
        checkpointDirInStore(this.options.checkpointDir, v.checkpointUri);
      } catch (e) {
        // Refused before it is ever noted: an earlier version (or version 0 at start) goes on serving.
        this.refused++;
        this.log.warn('refused a policy version: its checkpoint is outside the checkpoint store', {
          policyId: v.policyId,
          version: v.version,
          reason: errorMessage(e),
        });
        return false;
      }
    }
    this.announced.set(v.policyId, v);
    for (const w of [...this.waiters]) w();
    return true;
  }

  /** One load at a time per policy; a newer announcement during a load is picked up right after it. */
  private scheduleLoad(policyId: string): void {
    if (this.loading.has(policyId) || this.stopped) return;
    const run = (async () => {
      try {
        for (;;) {
          const target = this.announced.get(policyId) as PolicyVersion;
          const have = Math.max(this.registry.has(policyId) ? this.registry.get(policyId).version : -1, this.pending.get(policyId)?.version ?? -1);
          if (target.version <= have || this.stopped) return;
          try {
            const policy = await this.loadAnnounced(target);
            if (this.stopped) {
              policy.dispose();
              return;
            }
            this.pending.get(policyId)?.dispose();
            this.pending.set(policyId, policy);
          } catch (e) {
            // A checkpoint that fails verification is never sampled with; the next announcement may be fine.
            this.log.error('announced checkpoint could not be loaded; keeping the current weights', {
              policyId,
              version: target.version,
              checkpointUri: target.checkpointUri,
              error: errorMessage(e),
            });
            return;
          }
        }
      } finally {
        this.loading.delete(policyId);
      }
    })();
    this.loading.set(policyId, run);
  }

  private async loadAnnounced(v: PolicyVersion): Promise<Policy> {
    // Checked again as it loads: a link inside the store may have been pointed elsewhere since the announcement.
    const dir = this.options.confineToCheckpointDir ? checkpointDirInStore(this.options.checkpointDir, v.checkpointUri) : checkpointDirOf(v.checkpointUri);
    const loaded = await loadCheckpoint(dir);
    const { manifest } = loaded;
    if (manifest.policyId !== v.policyId || manifest.version !== v.version || manifest.weightsHash !== v.weightsHash) {
      loaded.policy.dispose();
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `checkpoint ${dir} holds ${manifest.policyId} v${manifest.version} with weights ${manifest.weightsHash}; the announcement says ${v.policyId} v${v.version} with ${v.weightsHash}`,
      );
    }
    this.checkShape(loaded.policy, dir);
    return this.shareBase(loaded.policy);
  }

  /** Held LoRA bases (one per base directory), for tests and /health. */
  get sharedBases(): number {
    return this.bases.size;
  }

  /**
   * A LoRA policy as a view of the shared base of its directory: its adapter is moved to a view
   * of the base held for that directory hash (the first such policy's base becomes it), and the
   * base it was loaded with is disposed. The checkpoint load has already checked that the
   * directory's hash is the one the adapter was trained on.
   */
  private shareBase(policy: Policy): Policy {
    const model = policy.model;
    if (!this.options.shareLoraBases || !isLlamaModel(model) || !model.adapter || !model.source) return policy;
    const adapter = model.adapter;
    model.setAdapter(undefined);
    let base = this.bases.get(model.source.hash);
    if (base) model.dispose();
    else {
      base = model;
      this.bases.set(model.source.hash, base);
    }
    return new Policy(policy.id, base.adapterView(adapter), policy.version);
  }

  private async loadInitial(policyId: string): Promise<Policy> {
    const store = new CheckpointStore(this.options.checkpointDir);
    const dir = store.dirFor(policyId, 0);
    const deadline = Date.now() + this.options.startupTimeoutMs;
    let waited = false;
    while (!fs.existsSync(path.join(dir, 'model.json'))) {
      if (this.stopped) throw new SrpoError(ErrorCode.CONFLICT, 'policy pool stopped during startup');
      if (Date.now() > deadline) {
        throw new SrpoError(
          ErrorCode.UNAVAILABLE,
          `no PolicyVersion announced for ${policyId} and no version 0 at ${dir} after ${this.options.startupTimeoutMs} ms: is its learner running with SRPO_CHECKPOINT_DIR=${this.options.checkpointDir}?`,
        );
      }
      if (!waited) this.log.info('waiting for version 0 of a policy', { policyId, dir });
      waited = true;
      await new Promise((r) => setTimeout(r, 250));
      // A version may have been announced meanwhile.
      const v = this.announced.get(policyId);
      if (v) return this.loadAnnounced(v);
    }
    const loaded = await store.load(policyId, 0);
    this.checkShape(loaded.policy, dir);
    return this.shareBase(loaded.policy);
  }

  /** A policy the sampler cannot use is refused before it is ever sampled with. */
  private checkShape(policy: Policy, dir: string): void {
    const problem = this.options.accept?.(policy);
    if (problem === undefined) return;
    policy.dispose();
    throw new SrpoError(ErrorCode.CONFIG_INVALID, `checkpoint ${dir}: ${problem}`);
  }
}
