import { DynamicModule, Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { AgentEventsProducer, createKafka, EventCodec, topicCatalog, type ContentSealer } from '@srpo/events';
import { CompletionGateway, EpisodeOwners, EventSpool, KeyRateLimiter, OpenAiErrorFilter, ResponsesGateway } from '@srpo/serving';
import type { GatewayConfig } from './gateway-config';
import { GatewayController, toGatewayError } from './gateway.controller';

export const GATEWAY_SDK = Symbol('GATEWAY_SDK');
export const GATEWAY_SPOOL = Symbol('GATEWAY_SPOOL');

@Module({})
export class GatewayModule implements OnApplicationShutdown {
  constructor(
    @Inject(GATEWAY_SDK) private readonly sdk: AgentEventsProducer,
    @Inject(GATEWAY_SPOOL) private readonly spool: EventSpool | null,
  ) {}

  static forRoot(config: GatewayConfig, sdk: AgentEventsProducer): DynamicModule {
    const spool = config.spoolDir ? new EventSpool(config.spoolDir, (events) => sdk.emitBatch(events), { maxBytes: config.spoolMaxBytes }) : undefined;
    spool?.open();
    const gateway = new CompletionGateway({
      upstreamUrl: config.upstreamUrl,
      upstreamApiKey: config.upstreamApiKey,
      models: config.models,
      upstreamTokenIds: config.upstreamTokenIds,
      strict: config.strict,
      keys: config.keys,
      sdk,
      retokenizer: config.retokenizer,
      tokenPrompts: config.tokenPrompts,
      versionFallback: config.fixedVersion === undefined ? undefined : () => config.fixedVersion,
      upstreamTimeoutMs: config.upstreamTimeoutMs,
      maxInFlight: config.maxInFlight,
      recordTimeoutMs: config.recordTimeoutMs,
      spool,
      episodeOwners: new EpisodeOwners({ maxEpisodes: config.episodeOwnersMax, idleTtlMs: config.episodeOwnersTtlMs }),
      rateLimiter: new KeyRateLimiter({ ratePerS: config.keyRatePerS, burst: config.keyBurst }),
    });
    return {
      module: GatewayModule,
      controllers: [GatewayController],
      providers: [
        { provide: CompletionGateway, useValue: gateway },
        { provide: ResponsesGateway, useValue: new ResponsesGateway(gateway, config.keys) },
        { provide: GATEWAY_SDK, useValue: sdk },
        { provide: GATEWAY_SPOOL, useValue: spool ?? null },
        { provide: APP_FILTER, useValue: new OpenAiErrorFilter(toGatewayError) },
      ],
    };
  }

  async onApplicationShutdown(): Promise<void> {
    // A last attempt to hand the spool to Kafka; what is left stays on disk for the next start.
    await this.spool?.drain();
    await this.spool?.close();
    await this.sdk.disconnect();
  }
}

/** The SDK producer the gateway records with (connected by main before the API opens); `sealer`: with SRPO_SEAL_CONTENT. */
export function gatewaySdk(config: GatewayConfig, sealer?: ContentSealer): AgentEventsProducer {
  return new AgentEventsProducer({ kafka: createKafka(config.kafka), codec: new EventCodec(), topics: topicCatalog(config.topics), sealer });
}
