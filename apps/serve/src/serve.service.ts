import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { initTfBackend, Logger } from '@srpo/core';
import { createKafka, topicCatalog } from '@srpo/events';
import { CompletionService, GenerationEngine, PolicyPool, ServedModels, type ChunkSink, type ParsedRequest } from '@srpo/serving';
import type { ServeConfig } from './serve-config';

/**
 * The served policies, kept current from the policy-versions topic, and the completion
 * service over them. A newly loaded version is swapped in as a request arrives; requests
 * already generating finish on the version they started with.
 */
@Injectable()
export class ServeService implements OnApplicationShutdown {
  private readonly log = new Logger('serve');
  private pool?: PolicyPool;
  private completions?: CompletionService;
  private readonly engine: GenerationEngine;

  constructor(private readonly config: ServeConfig) {
    this.engine = new GenerationEngine({ maxBatchRows: config.maxBatchRows, maxQueuedRows: config.maxQueuedRows });
  }

  async start(): Promise<void> {
    await initTfBackend(this.config.backend, this.config.backendSettings);
    let models: ServedModels | undefined;
    const pool = new PolicyPool({
      kafka: createKafka(this.config.kafka),
      catalog: topicCatalog(this.config.topics),
      rolePolicies: Object.fromEntries(this.config.policies.map((p) => [p, p])),
      checkpointDir: this.config.checkpointDir,
      startupTimeoutMs: this.config.startupTimeoutMs,
      retire: (old) => (models ? models.retire(old) : old.dispose()),
    });
    this.pool = pool;
    models = new ServedModels(pool.registry);
    await pool.start();
    this.completions = new CompletionService(models, this.engine);
    this.log.info('serving', { policies: this.config.policies, versions: pool.versions() });
  }

  listModels(): Record<string, unknown> {
    this.pool?.applyPending();
    return this.service().listModels();
  }

  /** Runs one request on the newest loaded versions. */
  run(req: ParsedRequest, sink?: ChunkSink): ReturnType<CompletionService['run']> {
    const changed = this.pool?.applyPending() ?? [];
    if (changed.length > 0) this.log.info('new version in use', { policies: changed, versions: this.pool?.versions() });
    return this.service().run(req, sink);
  }

  versions(): Record<string, number> {
    return this.pool?.versions() ?? {};
  }

  stats(): Record<string, number> {
    return { ...this.engine.totals };
  }

  async onApplicationShutdown(): Promise<void> {
    await this.engine.drain();
    await this.pool?.stop();
  }

  private service(): CompletionService {
    if (!this.completions) throw new Error('srpo serve is still starting');
    return this.completions;
  }
}
