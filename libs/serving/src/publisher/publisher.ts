import { ErrorCode, errorMessage, isRetriable, Logger, MetricsSink, retry, RetryStoppedError, SrpoError, type RetryOptions } from '@srpo/core';
import type { PolicyVersion } from '@srpo/events';
import { versionedName } from '../lora-adapters';
import { exportLoraVersion, isLoraCheckpoint } from './adapter-export';
import { LoraServerClient, serverBase } from './lora-server-client';

export interface PublisherOptions {
  /** Inference servers that answer vLLM's LoRA endpoints (vLLM, `srpo serve --model`), e.g. `http://a:8000`. */
  servers: readonly string[];
  /** `srpo gateway`s told which served name is each policy's current version (`POST /v1/srpo/served-models`). */
  gateways: readonly string[];
  /** Where each version's peft directory is written; the servers must read the same path. */
  exportDir: string;
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
 * 4. once every server holds it, tells each gateway that `<policy>@v<N>` is the policy's
 *    current version, so the gateway sends requests there and records N as their behaviour
 *    version. Until then the gateway keeps the previous name, which every server still holds.
 *
 * Newest wins: a version announced while an older one is still being exported or retried
 * replaces it, per policy and per server.
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
  /** Newest version each gateway was told of, per policy (key `gateway\npolicy`). */
  private readonly told = new Map<string, number>();
  private readonly running = new Map<string, Promise<void>>();
  private stopped = false;
  /** Waits in progress, ended early by {@link stop}. */
  private readonly wakers = new Set<() => void>();
  private readonly reconcileTimer?: NodeJS.Timeout;

  constructor(private readonly o: PublisherOptions) {
    this.log = o.logger ?? new Logger('publisher');
    this.client = new LoraServerClient(o.requestTimeoutMs, o.serverApiKey);
    this.metrics = o.metrics ?? new MetricsSink();
    for (const s of o.servers) this.loaded.set(serverBase(s), new Map());
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

  /** Resolves once nothing is being exported, loaded or told (every server and gateway up to date, or given up on). */
  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running.values()]);
  }

  /** Stops retrying and waits for the calls in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.reconcileTimer);
    for (const wake of [...this.wakers]) wake();
    await this.idle();
  }

  /**
   * Redoes what a restart lost: a server that no longer lists a policy's current adapter is
   * loaded again, a gateway that reports another version (or none) is told again. A server or
   * gateway that cannot be asked is left to the next round.
   */
  async reconcile(): Promise<void> {
    for (const [server, byPolicy] of this.loaded) {
      if (this.stopped) return;
      const names = await this.listModels(server);
      if (!names) continue;
      for (const [policyId, target] of this.ready) {
        if ((byPolicy.get(policyId) ?? -1) < target.version || names.includes(target.name)) continue;
        this.log.warn('a server lost the current adapter (restarted?); loading it again', { server, name: target.name });
        this.metrics.count('publish/reloads', { server });
        byPolicy.delete(policyId);
        this.spawn(`load\n${server}\n${policyId}`, () => this.serverLoop(server, policyId));
      }
    }
    for (const g of this.o.gateways.map(serverBase)) {
      if (this.stopped) return;
      let current: Map<string, number>;
      try {
        const res = await fetch(`${g}/v1/srpo/served-models`, {
          headers: this.o.gatewayApiKey ? { authorization: `Bearer ${this.o.gatewayApiKey}` } : {},
          signal: AbortSignal.timeout(this.o.requestTimeoutMs ?? 60_000),
        });
        const body = (await res.json()) as { data?: { policy_id?: unknown; version?: unknown }[] };
        current = new Map((body.data ?? []).map((d) => [String(d.policy_id), Number(d.version)] as const));
      } catch (e) {
        this.failed(g, e, { gateway: true, listing: true });
        continue;
      }
      for (const [policyId] of this.ready) {
        const key = `${g}\n${policyId}`;
        const told = this.told.get(key);
        if (told === undefined || current.get(policyId) === told) continue;
        this.log.warn('a gateway lost the current version (restarted?); telling it again', { gateway: g, policyId, version: told });
        this.told.delete(key);
        this.maybeTellGateways(policyId);
      }
    }
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
        if (!isLoraCheckpoint(v)) {
          this.log.warn('a full-weight version is not published: the servers load LoRA adapters only (restart them on `srpo model export --format hf`)', {
            policyId,
            version: v.version,
          });
          this.metrics.count('publish/skipped_full_weight', { policy: policyId });
          if (this.offered.get(policyId) === v) return;
          continue;
        }
        const dir = await exportLoraVersion(v, this.o.exportDir);
        this.ready.set(policyId, { version: v.version, name: versionedName(policyId, v.version), path: dir });
        this.log.info('version exported', { policyId, version: v.version, dir });
      } catch (e) {
        this.log.error('version could not be exported; waiting for the next', { policyId, version: v.version, error: errorMessage(e) });
        this.metrics.count('publish/export_failures', { policy: policyId });
        if (this.offered.get(policyId) === v) return;
        continue;
      }
      for (const server of this.loaded.keys()) this.spawn(`load\n${server}\n${policyId}`, () => this.serverLoop(server, policyId));
      if (this.loaded.size === 0) this.maybeTellGateways(policyId);
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
      this.maybeTellGateways(policyId);
    }
  }

  /**
   * Unloads `<policy>@v<N>` adapters older than the newest `keep` (best effort: a failure is
   * reported, never retried forever). The version a gateway still sends requests to is never
   * unloaded, whatever `keep` says: it goes once every gateway has moved past it.
   */
  private async unloadOld(server: string, policyId: string, newest: number): Promise<void> {
    const names = await this.listModels(server);
    if (!names) return;
    const prefix = `${policyId}@v`;
    const routed = this.o.gateways.map((g) => this.told.get(`${serverBase(g)}\n${policyId}`)).filter((v): v is number => v !== undefined);
    const oldestRouted = routed.length > 0 ? Math.min(...routed) : Infinity;
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

  /** Tells every gateway of the newest version that every server holds. */
  private maybeTellGateways(policyId: string): void {
    const ready = this.ready.get(policyId);
    if (!ready) return;
    const everywhere = [...this.loaded.values()].every((m) => (m.get(policyId) ?? -1) >= ready.version);
    if (!everywhere) return;
    for (const g of this.o.gateways) this.spawn(`tell\n${serverBase(g)}\n${policyId}`, () => this.gatewayLoop(serverBase(g), policyId));
  }

  private async gatewayLoop(gateway: string, policyId: string): Promise<void> {
    const key = `${gateway}\n${policyId}`;
    for (;;) {
      const target = this.ready.get(policyId) as Ready;
      if (this.stopped || (this.told.get(key) ?? -1) >= target.version) return;
      const superseded = () => this.stopped || this.ready.get(policyId) !== target;
      try {
        await retry(() => this.tell(gateway, policyId, target), {
          ...this.retryOptions(),
          stopped: superseded,
          onRetry: (e, attempt, delayMs) => this.failed(gateway, e, { policyId, version: target.version, attempt, retryInMs: delayMs, gateway: true }),
        });
        this.told.set(key, target.version);
        this.metrics.set('publish/gateway_version', target.version, { gateway, policy: policyId });
        this.log.info('gateway told the current version', { gateway, policyId, model: target.name, version: target.version });
        // Versions kept only because this gateway still routed to them may go now.
        for (const [server, byPolicy] of this.loaded)
          if ((byPolicy.get(policyId) ?? -1) >= target.version)
            this.spawn(`unload\n${server}\n${policyId}`, () => this.unloadOld(server, policyId, target.version));
      } catch (e) {
        if (e instanceof RetryStoppedError || superseded()) continue;
        this.failed(gateway, e, { policyId, version: target.version, givenUp: true, gateway: true });
        return;
      }
    }
  }

  private async tell(gateway: string, policyId: string, target: Ready): Promise<void> {
    let res: Response;
    try {
      res = await fetch(`${gateway}/v1/srpo/served-models`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.o.gatewayApiKey ? { authorization: `Bearer ${this.o.gatewayApiKey}` } : {}) },
        body: JSON.stringify({ policy_id: policyId, model: target.name, version: target.version }),
        signal: AbortSignal.timeout(this.o.requestTimeoutMs ?? 60_000),
      });
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `${gateway}: unreachable (${errorMessage(e)})`, { retriable: true, cause: e });
    }
    if (res.ok) return;
    const text = await res.text().catch(() => '');
    const retriable = res.status >= 500 || res.status === 429;
    throw new SrpoError(
      retriable ? ErrorCode.UNAVAILABLE : ErrorCode.VALIDATION_FAILED,
      `${gateway} served-models answered ${res.status}: ${text.slice(0, 300)}`,
      {
        retriable,
      },
    );
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
