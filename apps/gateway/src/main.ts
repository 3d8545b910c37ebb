import 'reflect-metadata';
import * as fs from 'fs';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { NestFactory } from '@nestjs/core';
import { errorMessage, holdIdleConnections, Logger, NestLoggerAdapter, SrpoError } from '@srpo/core';
import type { AgentEventsProducer } from '@srpo/events';
import { upstreamTarget } from '@srpo/serving';
import { KeyStore } from '@srpo/store';
import { applyGatewayConfig, loadGatewayConfig, type GatewayConfig } from './gateway-config';
import { GatewayModule, gatewaySdk } from './gateway.module';

/** The gateway's HTTP application over `sdk`, not yet listening (bootstrap, and the app's spec with a producer it never connects). */
export async function createGatewayApp(config: GatewayConfig, sdk: AgentEventsProducer): Promise<NestExpressApplication> {
  const httpsOptions = config.tls ? { key: fs.readFileSync(config.tls.keyFile), cert: fs.readFileSync(config.tls.certFile) } : undefined;
  const app = await NestFactory.create<NestExpressApplication>(GatewayModule.forRoot(config, sdk), {
    logger: new NestLoggerAdapter(),
    abortOnError: false,
    bodyParser: false,
    ...(httpsOptions ? { httpsOptions } : {}),
  });
  app.useBodyParser('json', { limit: config.maxBodyBytes });
  return app;
}

/** Boots `srpo gateway`: config (fails fast), the SDK producer connected, then the API. */
export async function bootstrap(env: Readonly<Record<string, string | undefined>> = process.env): Promise<NestExpressApplication> {
  const config = loadGatewayConfig(env);
  applyGatewayConfig(config);
  const log = new Logger('gateway');
  // With SRPO_SEAL_CONTENT, content keys come from the store (and the store's connection closes with the process).
  const keys = config.sealStore ? await KeyStore.open(config.sealStore) : undefined;
  const sdk = gatewaySdk(config, keys);
  await sdk.connect();
  const app = await createGatewayApp(config, sdk);
  app.enableShutdownHooks();
  holdIdleConnections(app.getHttpServer());
  await app.listen(config.port, config.host);
  const address = app.getHttpServer().address() as { port: number } | null;
  if (!config.keys.enabled) log.warn('no SRPO_GATEWAY_API_KEYS: every caller may record events for every policy');
  log.info('gateway listening', {
    host: config.host,
    port: address?.port ?? config.port,
    tls: Boolean(config.tls),
    // Without the credentials the URL may carry.
    upstream: upstreamTarget(config.upstreamUrl).base,
    keys: config.keys.enabled ? config.keys.ids : undefined,
    strict: config.strict,
    retokenize: Boolean(config.retokenizer),
    sealContent: Boolean(keys),
  });
  return app;
}

if (require.main === module) {
  bootstrap().catch((e: unknown) => {
    new Logger('gateway').error('srpo gateway failed to start', {
      error: errorMessage(e),
      code: e instanceof SrpoError ? e.code : undefined,
      field: e instanceof SrpoError ? e.field : undefined,
    });
    process.exit(1);
  });
}
