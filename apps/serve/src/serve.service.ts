import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { initTfBackend, Logger } from '@srpo/core';
import { createKafka, topicCatalog } from '@srpo/events';
import { loadHfModel } from '@srpo/hf';
import { Policy } from '@srpo/policy';
import {
  CompletionService,
  GenerationEngine,
  LoraAdapters,
  PolicyPool,
  ServedModels,
  keyAllows,
  type ApiKeyIdentity,
  type ApiKeys,
  type ChunkSink,
  type ParsedRequest,
} from '@srpo/serving';
import { ErrorCode, SrpoError } from '@srpo/core';
import type { ServeConfig } from './serve-config';

/**
 * The served models: the policies, kept current from the policy-versions topic, a `--model`
 * directory served on its own, and the LoRA adapters loaded over it at run time; and the
 * completion service over them. A newly loaded version is swapped in as a request arrives;
 * requests already generating finish on the version they started with.
 */
@Injectable()
export class ServeService implements OnApplicationShutdown {
  private readonly log = new Logger('serve');
  private pool?: PolicyPool;
  private models?: ServedModels;
  private adapters?: LoraAdapters;
  private completions?: CompletionService;
  private readonly engine: GenerationEngine;

  constructor(private readonly config: ServeConfig) {
    this.engine = new GenerationEngine({
      maxBatchRows: config.maxBatchRows,
      maxQueuedRows: config.maxQueuedRows,
      kvCacheTokens: config.kvCacheTokens,
      decodeProducts: config.decodeProducts,
    });
  }

  async start(): Promise<void> {
    await initTfBackend(this.config.backend, this.config.backendSettings);
    let models: ServedModels | undefined;
    if (this.config.policies.length > 0) {
      const pool = new PolicyPool({
        kafka: createKafka(this.config.kafka),
        catalog: topicCatalog(this.config.topics),
        rolePolicies: Object.fromEntries(this.config.policies.map((p) => [p, p])),
        checkpointDir: this.config.checkpointDir,
        confineToCheckpointDir: true,
        startupTimeoutMs: this.config.startupTimeoutMs,
        shareLoraBases: true,
        retire: (old) => (models ? models.retire(old) : old.dispose()),
      });
      this.pool = pool;
      models = new ServedModels(pool.registry);
      await pool.start();
    } else {
      models = new ServedModels();
    }
    this.models = models;
    if (this.config.modelDir !== undefined && this.config.modelName !== undefined) {
      const base = loadHfModel(this.config.modelDir).model;
      models.addNamed(this.config.modelName, new Policy(this.config.modelName, base, 0));
      this.adapters = new LoraAdapters({ base, models, maxAdapters: this.config.maxLoras });
      this.log.info('serving a model directory', { model: this.config.modelName, dir: this.config.modelDir });
    }
    this.completions = new CompletionService(models, this.engine, { maxTokens: this.config.maxTokens });
    this.log.info('serving', { models: models.ids(), versions: this.versions() });
  }

  /** The models `key` may use (all without keys). */
  listModels(key: ApiKeyIdentity | undefined): Record<string, unknown> {
    this.pool?.applyPending();
    return this.service().listModels((id) => keyAllows(key, id));
  }

  /** Runs one request on the newest loaded versions; `signal` aborts it (its client went away). */
  run(req: ParsedRequest, sink?: ChunkSink, signal?: AbortSignal): ReturnType<CompletionService['run']> {
    const changed = this.pool?.applyPending() ?? [];
    if (changed.length > 0) this.log.info('new version in use', { policies: changed, versions: this.pool?.versions() });
    return this.service().run(req, sink, signal);
  }

  /** `/v1/load_lora_adapter`: serves the peft adapter at `path` as `name`, over the `--model` base. */
  loadLora(name: unknown, path: unknown): { evicted: string[] } {
    return this.loraAdapters().load(name, path);
  }

  /** `/v1/unload_lora_adapter`. */
  unloadLora(name: unknown): void {
    this.loraAdapters().unload(name);
  }

  /** The API keys requests are checked against (open when none are configured). */
  get keys(): ApiKeys {
    return this.config.keys;
  }

  get runtimeLora(): boolean {
    return this.config.runtimeLora;
  }

  versions(): Record<string, number> {
    const models = this.models;
    if (!models) return {};
    return Object.fromEntries(models.ids().map((id) => [id, models.version(id)]));
  }

  stats(): Record<string, number> {
    return {
      ...this.engine.totals,
      kvSlots: this.engine.kvSlots,
      loras: this.adapters?.names().length ?? 0,
      refusedCheckpoints: this.pool?.refusedCheckpoints ?? 0,
    };
  }

  async onApplicationShutdown(): Promise<void> {
    await this.engine.drain();
    await this.pool?.stop();
    this.models?.disposeNamed();
  }

  private loraAdapters(): LoraAdapters {
    if (!this.adapters)
      throw new SrpoError(
        ErrorCode.CONFIG_INVALID,
        'this server has no base model for LoRA adapters: start srpo serve with --model DIR (SRPO_SERVE_MODEL_DIR)',
      );
    return this.adapters;
  }

  private service(): CompletionService {
    if (!this.completions) throw new Error('srpo serve is still starting');
    return this.completions;
  }
}
