import { DynamicModule, Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { AgentEventsProducer, createKafka, EventCodec, topicCatalog } from '@srpo/events';
import { CompletionGateway } from '@srpo/serving';
import type { GatewayConfig } from './gateway-config';
import { GatewayController } from './gateway.controller';
import { OpenAiErrorFilter } from './openai-error.filter';

export const GATEWAY_SDK = Symbol('GATEWAY_SDK');

@Module({})
export class GatewayModule implements OnApplicationShutdown {
  constructor(@Inject(GATEWAY_SDK) private readonly sdk: AgentEventsProducer) {}

  static forRoot(config: GatewayConfig, sdk: AgentEventsProducer): DynamicModule {
    const gateway = new CompletionGateway({
      upstreamUrl: config.upstreamUrl,
      upstreamApiKey: config.upstreamApiKey,
      models: config.models,
      upstreamTokenIds: config.upstreamTokenIds,
      strict: config.strict,
      keys: config.keys,
      sdk,
      retokenizer: config.retokenizer,
      versionFallback: config.fixedVersion === undefined ? undefined : () => config.fixedVersion,
      upstreamTimeoutMs: config.upstreamTimeoutMs,
      maxInFlight: config.maxInFlight,
    });
    return {
      module: GatewayModule,
      controllers: [GatewayController],
      providers: [
        { provide: CompletionGateway, useValue: gateway },
        { provide: GATEWAY_SDK, useValue: sdk },
        { provide: APP_FILTER, useClass: OpenAiErrorFilter },
      ],
    };
  }

  async onApplicationShutdown(): Promise<void> {
    await this.sdk.disconnect();
  }
}

/** The SDK producer the gateway records with (connected by main before the API opens). */
export function gatewaySdk(config: GatewayConfig): AgentEventsProducer {
  return new AgentEventsProducer({ kafka: createKafka(config.kafka), codec: new EventCodec(), topics: topicCatalog(config.topics) });
}
