import * as path from 'path';
import { ErrorCode, errorMessage, isRetriable, Logger, MetricsSink, retry, RetryStoppedError, SrpoError, type RetryOptions } from '@srpo/core';
import type { PolicyVersion } from '@srpo/events';
import { versionedName } from '../lora-adapters';
import { exportLoraVersion, isLoraCheckpoint } from './adapter-export';
import { GatewayClient } from './gateway-client';
import type { HeldOutResult } from './held-out-evaluator';
import { LoraServerClient, serverBase } from './lora-server-client';
import { judgeCandidate, type PublishGateOptions } from './publish-gate';
import { appendDecision, readDecisions, readPin, removePin, type PublishDecision } from './publish-records';

export interface PublisherOptions {
  /** Inference servers that answer vLLM's LoRA endpoints (vLLM, `srpo serve --model`), e.g. `http://a:8000`. */
  servers: readonly string[];
  /** `srpo gateway`s told which served name is each policy's current version (`POST /v1/srpo/served-models`). */
  gateways: readonly string[];
  /** Where each version's peft directory is written; the servers must read the same path. */
  exportDir: string;
  /** The learners' checkpoint store (SRPO_CHECKPOINT_DIR): a version whose checkpoint lies outside it is refused, never read. */
  checkpointDir: string;
  /** Versions of a policy left loaded on each server (the newest); older `<policy>@v<N>` adapters are unloaded. */
  keep: number;
  /** Bearer key for the servers' endpoints (vLLM's `--api-key`). */
  serverApiKey?: string;
  /** An admin key (`["*"]`) of the gateways. */
  gatewayApiKey?: string;
  requestTimeoutMs?: number;
  /**
   * Every this many ms, check that each server still lists the current adapters and each
   * gateway the current version, and redo what is missing (a restarted server or gateway has
   * lost them). 0: never. Default 30000.
   */
  reconcileMs?: number;
  /** Backoff against a server or gateway that is down (the project's retrier; unbounded attempts until a newer version supersedes). */
  retry?: Pick<RetryOptions, 'initialDelayMs' | 'maxDelayMs' | 'sleep'>;
  /** The gate between "loaded on every server" and "gateways switched"; unset: every version is switched to. */
  gate?: PublishGateOptions;
  metrics?: MetricsSink;
  logger?: Logger;
}

/** One version ready to load: its served name and peft directory. */
interface Ready {
  version: number;
  name: string;
  path: string;
}

/** Where one server stands, per policy. */
export interface ServerStatus {
  server: string;
  /** policy → the newest version loaded there by this publisher. */
  loaded: Record<string, number>;
  /** Failed attempts since start. */
  failures: number;
  lastError?: string;
}

/**
 * Hands each new LoRA version of the followed policies to inference servers and gateways, out of
 * the learner's path (it reads the policy-versions topic, as every sampler does, so the learner
 * never waits for it). For each version it
 * 1. writes the adapter as a peft directory ({@link exportLoraVersion}); a full-weight version
 *    is skipped and reported (vLLM needs a restart for new full weights);
 * 2. loads it on every server as `<policy>@v<N>` (`POST /v1/load_lora_adapter`), each server on
 *    its own, so a server that is down is retried with backoff (`retry` of @srpo/core), logged
 *    and counted (`publish/load_failures{server}`) while the others go on;
 * 3. unloads that policy's adapters older than the newest `keep` from the server
 *    (`/v1/models` says which `<policy>@v<N>` it holds, so a restarted publisher cleans up too);
 * 4. once every server holds it, passes it through the gate when one is configured
 *    ({@link PublishGateOptions}: the candidate and the serving version scored on the same
 *    held-out items through a server's OpenAI API). A refused version is recorded with its
 *    figures (`decisions.jsonl` under the export directory, a log line,
 *    `publish/gate_refused{policy}`) and unloaded from every server; the gateways keep the
 *    serving version;
 * 5. tells each gateway that `<policy>@v<N>` is the policy's current version, so the gateway
 *    sends requests there and records N as their behaviour version. Until then the gateway
 *    keeps the previous name, which every server still holds.
 *
 * A pin (`srpo publish rollback`, {@link rollbackTo}) overrides: the gateways serve the pinned
 * version; with a gate, a newer version that passes it against the pinned one removes the pin,
 * and with no gate nothing does but `srpo publish unpin`. Accepted, refused and rolled-back
 * versions are read back from `decisions.jsonl` at start, so a restarted publisher neither
 * publishes a version refused before nor forgets what is served.
 *
 * Newest wins: a version announced while an older one is still being exported, retried or
 * judged replaces it, per policy and per server.
 */
export class Publisher {
  private readonly log: Logger;
  private readonly client: LoraServerClient;
  private readonly metrics: MetricsSink;
  /** Newest version offered, per policy. */
  private readonly offered = new Map<string, PolicyVersion>();
  /** Newest version exported (ready to load), per policy. */
  private readonly ready = new Map<string, Ready>();
  /** server → policy → newest version loaded there. */
  private readonly loaded = new Map<string, Map<string, number>>();
  private readonly failures = new Map<string, { count: number; lastError?: string }>();
  /** The version each gateway was last told of, per policy (key `gateway\npolicy`). */
  private readonly told = new Map<string, number>();
  /** The version the gateways should serve when no pin says otherwise, per policy. */
  private readonly accepted = new Map<string, Ready>();
  /** Newest version the gate has decided on (accepted or refused), per policy. */
  private readonly decided = new Map<string, number>();
  /** Versions refused by the gate, per policy: never loaded again. */
  private readonly refused = new Map<string, Set<number>>();
  /** Held-out scores of serving versions (key `server\nmodel\nevaluator`). */
  private readonly servingScores = new Map<string, HeldOutResult>();
  private readonly gateways: GatewayClient;
  /** Aborted by {@link stop}: a held-out evaluation in flight ends at once. */
  private readonly stopping = new AbortController();
  private readonly running = new Map<string, Promise<void>>();
  private stopped = false;
  /** Waits in progress, ended early by {@link stop}. */
  private readonly wakers = new Set<() => void>();
  private readonly reconcileTimer?: NodeJS.Timeout;

  constructor(private readonly o: PublisherOptions) {
    this.log = o.logger ?? new Logger('publisher');
    this.client = new LoraServerClient(o.requestTimeoutMs, o.serverApiKey);
    this.metrics = o.metrics ?? new MetricsSink();
    this.gateways = new GatewayClient(o.requestTimeoutMs, o.gatewayApiKey);
    for (const s of o.servers) this.loaded.set(serverBase(s), new Map());
    for (const d of readDecisions(o.exportDir)) {
      if (d.decision === 'unpin') continue;
      this.decided.set(d.policyId, Math.max(this.decided.get(d.policyId) ?? -1, d.version));
      if (d.decision === 'refused') this.refusedOf(d.policyId).add(d.version);
      else this.accepted.set(d.policyId, { version: d.version, name: d.model, path: path.resolve(o.exportDir, d.policyId, `v${d.version}`) });
    }
    const every = o.reconcileMs ?? 30_000;
    if (every > 0) {
      this.reconcileTimer = setInterval(() => this.spawn('reconcile', () => this.reconcile()), every);
      this.reconcileTimer.unref();
    }
  }

  /** Takes an announced version; true when it is newer than any offered for its policy (it will be published). */
  offer(v: PolicyVersion): boolean {
    if (this.stopped) return false;
    const prev = this.offered.get(v.policyId);
    if (prev && prev.version >= v.version) return false;
    this.offered.set(v.policyId, v);
    this.spawn(`export\n${v.policyId}`, () => this.exportLoop(v.policyId));
    return true;
  }

  /** Where each server stands. */
  status(): ServerStatus[] {
    return [...this.loaded].map(([server, byPolicy]) => ({
      server,
      loaded: Object.fromEntries(byPolicy),
      failures: this.failures.get(server)?.count ?? 0,
      ...(this.failures.get(server)?.lastError ? { lastError: this.failures.get(server)?.lastError } : {}),
    }));
  }

  /** The version each gateway was last told of for `policyId` (undefined: not yet). */
  toldVersion(gateway: string, policyId: string): number | undefined {
    return this.told.get(`${serverBase(gateway)}\n${policyId}`);
  }

  /** The version the gateways should serve: the pinned one, else the newest accepted (undefined: none yet). */
  servingVersion(policyId: string): number | undefined {
    return this.servingTarget(policyId)?.version;
  }

  /** Resolves once nothing is being exported, loaded or told (every server and gateway up to date, or given up on). */
  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running.values()]);
  }

  /** Stops retrying and waits for the calls in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort();
    clearInterval(this.reconcileTimer);
    for (const wake of [...this.wakers]) wake();
    await this.idle();
  }

  /**
   * Redoes what a restart lost: a server that no longer lists a policy's newest adapter (unless
   * refused) or its serving one is loaded again, a gateway that reports another version than the
   * serving one (a pin's included) is told again. A server or gateway that cannot be asked is left
   * to the next round. Then each policy's newest version is judged if it was not (after an unpin).
   */
  async reconcile(): Promise<void> {
    // The policies this publisher was offered (decisions.jsonl may name others, published by another publisher).
    const policies = () => [...this.offered.keys()];
    for (const [server, byPolicy] of this.loaded) {
      if (this.stopped) return;
      const names = await this.listModels(server);
      if (!names) continue;
      for (const [policyId, target] of this.ready) {
        if (this.refused.get(policyId)?.has(target.version)) continue;
        if ((byPolicy.get(policyId) ?? -1) < target.version || names.includes(target.name)) continue;
        this.log.warn('a server lost the current adapter (restarted?); loading it again', { server, name: target.name });
        this.metrics.count('publish/reloads', { server });
        byPolicy.delete(policyId);
        this.spawn(`load\n${server}\n${policyId}`, () => this.serverLoop(server, policyId));
      }
      for (const policyId of policies()) {
        const serving = this.servingTarget(policyId);
        if (!serving || serving.version === this.ready.get(policyId)?.version || names.includes(serving.name)) continue;
        this.log.warn('a server lost the serving adapter (restarted?); loading it again', { server, name: serving.name });
        this.metrics.count('publish/reloads', { server });
        await this.client.load(server, serving.name, serving.path).catch((e: unknown) => this.failed(server, e, { policyId, version: serving.version }));
      }
    }
    for (const g of this.o.gateways.map(serverBase)) {
      if (this.stopped) return;
      let current: Map<string, { version: number }>;
      try {
        current = await this.gateways.served(g);
      } catch (e) {
        this.failed(g, e, { gateway: true, listing: true });
        continue;
      }
      for (const policyId of policies()) {
        const key = `${g}\n${policyId}`;
        const serving = this.servingTarget(policyId);
        if (!serving) continue;
        if (current.get(policyId)?.version === serving.version) {
          this.told.set(key, serving.version); // a rollback may have set it behind this publisher's back
          continue;
        }
        if (this.told.get(key) === undefined && !this.everywhere(policyId, serving.version)) continue; // not published yet
        this.log.warn('a gateway serves another version than the current one (restarted?); telling it again', {
          gateway: g,
          policyId,
          version: serving.version,
          reported: current.get(policyId)?.version,
        });
        this.told.delete(key);
        this.tellGateways(policyId);
      }
    }
    for (const policyId of this.ready.keys()) this.maybeGate(policyId);
  }

  /** One task per key at a time; a task started while one runs is picked up by the running one (newest wins). */
  private spawn(key: string, task: () => Promise<void>): void {
    if (this.running.has(key)) return;
    const p = task()
      .catch((e: unknown) => this.log.error('publisher task failed', { task: key.replace('\n', ' '), error: errorMessage(e) }))
      .finally(() => this.running.delete(key));
    this.running.set(key, p);
  }

  private async exportLoop(policyId: string): Promise<void> {
    for (;;) {
      const v = this.offered.get(policyId) as PolicyVersion;
      if (this.stopped || (this.ready.get(policyId)?.version ?? -1) >= v.version) return;
      try {
        if (!isLoraCheckpoint(v, this.o.checkpointDir)) {
          this.log.warn('a full-weight version is not published: the servers load LoRA adapters only (restart them on `srpo model export --format hf`)', {
            policyId,
            version: v.version,
          });
          this.metrics.count('publish/skipped_full_weight', { policy: policyId });
          if (this.offered.get(policyId) === v) return;
          continue;
        }
        if (this.refused.get(policyId)?.has(v.version)) {
          this.log.warn('a version the gate refused before is not loaded again', { policyId, version: v.version });
          if (this.offered.get(policyId) === v) return this.tellGateways(policyId);
          continue;
        }
        const dir = await exportLoraVersion(v, this.o.exportDir, this.o.checkpointDir);
        this.ready.set(policyId, { version: v.version, name: versionedName(policyId, v.version), path: dir });
        this.log.info('version exported', { policyId, version: v.version, dir });
      } catch (e) {
        this.log.error('version could not be exported; waiting for the next', { policyId, version: v.version, error: errorMessage(e) });
        this.metrics.count('publish/export_failures', { policy: policyId });
        if (this.offered.get(policyId) === v) return;
        continue;
      }
      for (const server of this.loaded.keys()) this.spawn(`load\n${server}\n${policyId}`, () => this.serverLoop(server, policyId));
      if (this.loaded.size === 0) this.maybeGate(policyId);
    }
  }

  /** Brings one server up to the newest ready version of a policy. */
  private async serverLoop(server: string, policyId: string): Promise<void> {
    const byPolicy = this.loaded.get(server) as Map<string, number>;
    for (;;) {
      const target = this.ready.get(policyId) as Ready;
      if (this.stopped || (byPolicy.get(policyId) ?? -1) >= target.version) return;
      const superseded = () => this.stopped || this.ready.get(policyId) !== target;
      try {
        const outcome = await retry(() => this.client.load(server, target.name, target.path), {
          ...this.retryOptions(),
          retryIf: (e) => isRetriable(e),
          stopped: superseded,
          onRetry: (e, attempt, delayMs) => this.failed(server, e, { policyId, version: target.version, attempt, retryInMs: delayMs }),
        });
        byPolicy.set(policyId, target.version);
        this.metrics.count('publish/loads', { server });
        this.metrics.set('publish/server_version', target.version, { server, policy: policyId });
        this.log.info('adapter loaded', { server, name: target.name, outcome });
      } catch (e) {
        if (e instanceof RetryStoppedError || superseded()) continue;
        // A refusal (the adapter does not fit, the endpoint is off) is not retried: reported, and the next version tries again.
        this.failed(server, e, { policyId, version: target.version, givenUp: true });
        return;
      }
      await this.unloadOld(server, policyId, target.version);
      this.maybeGate(policyId);
    }
  }

  /**
   * Unloads `<policy>@v<N>` adapters older than the newest `keep` (best effort: a failure is
   * reported, never retried forever). The version a gateway still sends requests to, the serving
   * one and a pinned one are never unloaded, whatever `keep` says: they go once every gateway has
   * moved past them.
   */
  private async unloadOld(server: string, policyId: string, newest: number): Promise<void> {
    const names = await this.listModels(server);
    if (!names) return;
    const prefix = `${policyId}@v`;
    const routed = this.o.gateways.map((g) => this.told.get(`${serverBase(g)}\n${policyId}`));
    routed.push(this.accepted.get(policyId)?.version, readPin(this.o.exportDir, policyId)?.version);
    const oldestRouted = Math.min(Infinity, ...routed.filter((v): v is number => v !== undefined));
    const versions = names
      .filter((n) => n.startsWith(prefix) && /^\d+$/.test(n.slice(prefix.length)))
      .map((n) => Number(n.slice(prefix.length)))
      .filter((n) => n !== newest)
      .sort((a, b) => b - a);
    for (const old of versions.slice(Math.max(0, this.o.keep - 1)).filter((v) => v < oldestRouted)) {
      try {
        await this.client.unload(server, versionedName(policyId, old));
        this.metrics.count('publish/unloads', { server });
        this.log.info('old adapter unloaded', { server, name: versionedName(policyId, old) });
      } catch (e) {
        this.failed(server, e, { policyId, version: old, unloading: true });
      }
    }
  }

  /** The model ids a server lists (`GET /v1/models`), or undefined (reported) when it cannot be asked. */
  private async listModels(server: string): Promise<string[] | undefined> {
    try {
      const res = await fetch(`${server}/v1/models`, {
        headers: this.o.serverApiKey ? { authorization: `Bearer ${this.o.serverApiKey}` } : {},
        signal: AbortSignal.timeout(this.o.requestTimeoutMs ?? 60_000),
      });
      if (!res.ok) throw new SrpoError(ErrorCode.UNAVAILABLE, `${server}/v1/models answered ${res.status}`, { retriable: true });
      const body = (await res.json()) as { data?: { id?: unknown }[] };
      return (body.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string');
    } catch (e) {
      this.failed(server, e, { listing: true });
      return undefined;
    }
  }

  /** Whether every server holds `version` (or newer) of the policy. */
  private everywhere(policyId: string, version: number): boolean {
    return [...this.loaded.values()].every((m) => (m.get(policyId) ?? -1) >= version);
  }

  private refusedOf(policyId: string): Set<number> {
    const s = this.refused.get(policyId) ?? new Set<number>();
    this.refused.set(policyId, s);
    return s;
  }

  /** The version the gateways should serve: the pin (adopted as the accepted version, so an unpin keeps it), else the accepted one. */
  private servingTarget(policyId: string): Ready | undefined {
    const pin = readPin(this.o.exportDir, policyId);
    if (!pin) return this.accepted.get(policyId);
    const current = this.accepted.get(policyId);
    if (current?.version === pin.version) return current;
    const r = { version: pin.version, name: pin.model, path: pin.path };
    this.accepted.set(policyId, r);
    return r;
  }

  /** Judges the newest version once every server holds it. */
  private maybeGate(policyId: string): void {
    const ready = this.ready.get(policyId);
    if (ready && this.everywhere(policyId, ready.version)) this.spawn(`gate\n${policyId}`, () => this.gateLoop(policyId));
  }

  /**
   * Decides on the newest version every server holds: accepted with no gate, with nothing served
   * yet to compare with, or when the gate passes it; refused (recorded, unloaded) otherwise. While
   * a pin holds and no gate is set nothing is decided (the pin waits for `srpo publish unpin`).
   * Then the gateways are told the serving version.
   */
  private async gateLoop(policyId: string): Promise<void> {
    for (;;) {
      const target = this.ready.get(policyId) as Ready;
      if (this.stopped) return;
      const pinned = readPin(this.o.exportDir, policyId) !== undefined;
      const serving = this.servingTarget(policyId);
      if ((this.decided.get(policyId) ?? -1) >= target.version || !this.everywhere(policyId, target.version) || (pinned && !this.o.gate))
        return this.tellGateways(policyId);
      let d: PublishDecision;
      const base = { at: new Date().toISOString(), policyId, version: target.version, model: target.name };
      if (serving?.version === target.version) d = { ...base, decision: 'accepted', reason: 'already the serving version' };
      else if (!this.o.gate) d = { ...base, decision: 'accepted', reason: 'no gate configured' };
      else if (!serving) d = { ...base, decision: 'accepted', reason: 'nothing served yet to compare with' };
      else {
        const gate = this.o.gate;
        const server = serverBase(gate.server ?? this.o.servers[0]);
        const superseded = () => this.stopped || this.ready.get(policyId) !== target;
        try {
          d = await retry(
            async () => {
              await this.client.load(server, serving.name, serving.path); // a restarted server may have lost it
              return judgeCandidate(gate, server, policyId, target, serving, this.servingScores, this.stopping.signal);
            },
            {
              ...this.retryOptions(),
              stopped: superseded,
              onRetry: (e, attempt, delayMs) => this.failed(server, e, { policyId, version: target.version, attempt, retryInMs: delayMs, gate: true }),
            },
          );
        } catch (e) {
          if (e instanceof RetryStoppedError || superseded()) continue; // stopping, or a newer version to judge
          d = {
            ...base,
            decision: 'refused',
            reason: `the held-out evaluation failed: ${errorMessage(e)}`,
            serving: { version: serving.version, model: serving.name },
          };
        }
        if (this.ready.get(policyId) !== target) continue; // a newer version arrived meanwhile: it is judged instead
      }
      this.decided.set(policyId, target.version);
      appendDecision(this.o.exportDir, d);
      this.metrics.count(d.decision === 'accepted' ? 'publish/gate_accepted' : 'publish/gate_refused', { policy: policyId });
      if (d.decision === 'accepted') {
        this.accepted.set(policyId, target);
        if (pinned && removePin(this.o.exportDir, policyId))
          this.log.info('a newer version passed the gate: the pin is removed', { policyId, version: target.version });
        this.log.info('version accepted', { policyId, version: target.version, reason: d.reason });
      } else {
        this.refusedOf(policyId).add(target.version);
        this.log.warn('version refused by the gate; the gateways keep the serving version', {
          policyId,
          version: target.version,
          serving: serving?.version,
          candidate: d.candidateResult,
          servingResult: d.servingResult,
          difference: d.difference,
          interval: d.interval,
          margin: d.margin,
          rule: d.rule,
          reason: d.reason,
        });
        for (const server of this.loaded.keys()) {
          await this.client.unload(server, target.name).catch((e: unknown) => this.failed(server, e, { policyId, version: target.version, unloading: true }));
        }
      }
    }
  }

  /** Tells every gateway the serving version (each gateway on its own, with retries). */
  private tellGateways(policyId: string): void {
    for (const g of this.o.gateways) this.spawn(`tell\n${serverBase(g)}\n${policyId}`, () => this.gatewayLoop(serverBase(g), policyId));
  }

  private async gatewayLoop(gateway: string, policyId: string): Promise<void> {
    const key = `${gateway}\n${policyId}`;
    for (;;) {
      const target = this.servingTarget(policyId);
      if (this.stopped || !target || this.told.get(key) === target.version) return;
      const superseded = () => this.stopped || this.servingTarget(policyId)?.version !== target.version;
      try {
        await retry(
          async () => {
            // Not the newest loaded (a refusal kept an older one, or a pin): make sure every server holds it.
            if (target.version !== this.ready.get(policyId)?.version) for (const s of this.loaded.keys()) await this.client.load(s, target.name, target.path);
            await this.gateways.setServed(gateway, policyId, target.name, target.version);
          },
          {
            ...this.retryOptions(),
            stopped: superseded,
            onRetry: (e, attempt, delayMs) => this.failed(gateway, e, { policyId, version: target.version, attempt, retryInMs: delayMs, gateway: true }),
          },
        );
        this.told.set(key, target.version);
        this.metrics.set('publish/gateway_version', target.version, { gateway, policy: policyId });
        this.log.info('gateway told the current version', { gateway, policyId, model: target.name, version: target.version });
        // Versions kept only because this gateway still routed to them may go now.
        for (const [server, byPolicy] of this.loaded) {
          const newest = byPolicy.get(policyId);
          if (newest !== undefined) this.spawn(`unload\n${server}\n${policyId}`, () => this.unloadOld(server, policyId, newest));
        }
      } catch (e) {
        if (e instanceof RetryStoppedError || superseded()) continue;
        this.failed(gateway, e, { policyId, version: target.version, givenUp: true, gateway: true });
        return;
      }
    }
  }

  /** The configured backoff, with waits that {@link stop} cuts short (a stopping publisher does not sit out a 30 s delay). */
  private retryOptions(): RetryOptions {
    const sleep = this.o.retry?.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
    return {
      ...this.o.retry,
      sleep: (ms) =>
        new Promise<void>((resolve) => {
          const wake = () => {
            this.wakers.delete(wake);
            resolve();
          };
          this.wakers.add(wake);
          void sleep(ms).then(wake);
        }),
    };
  }

  private failed(target: string, e: unknown, context: Record<string, unknown>): void {
    const f = this.failures.get(target) ?? { count: 0 };
    f.count++;
    f.lastError = errorMessage(e);
    this.failures.set(target, f);
    this.metrics.count(context.gateway ? 'publish/gateway_failures' : 'publish/load_failures', { target });
    this.log.warn(context.givenUp ? 'publishing to a server was refused; waiting for the next version' : 'a server or gateway failed; retrying', {
      target,
      ...context,
      error: f.lastError,
    });
  }
}
