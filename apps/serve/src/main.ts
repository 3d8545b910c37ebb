import 'reflect-metadata';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { NestFactory } from '@nestjs/core';
import { errorMessage, holdIdleConnections, isLoopbackHost, Logger, NestLoggerAdapter, SrpoError } from '@srpo/core';
import { applyServeConfig, loadServeConfig } from './serve-config';
import { ServeModule } from './serve.module';
import { ServeService } from './serve.service';

/** Boots `srpo serve`: config (fails fast), backend, version 0 of every policy, then the OpenAI-compatible API. */
export async function bootstrap(env: Readonly<Record<string, string | undefined>> = process.env): Promise<NestExpressApplication> {
  const config = loadServeConfig(env);
  applyServeConfig(config);
  const app = await NestFactory.create<NestExpressApplication>(ServeModule.forRoot(config), {
    logger: new NestLoggerAdapter(),
    abortOnError: false,
    bodyParser: false,
  });
  app.useBodyParser('json', { limit: config.maxBodyBytes });
  app.enableShutdownHooks();
  await app.get(ServeService).start();
  holdIdleConnections(app.getHttpServer());
  await app.listen(config.port, config.host);
  const address = app.getHttpServer().address() as { port: number } | null;
  const log = new Logger('serve');
  if (!config.keys.enabled && !isLoopbackHost(config.host))
    log.warn('no SRPO_SERVE_API_KEYS: anyone who reaches this address may generate with every served model', { host: config.host });
  log.info('OpenAI-compatible API listening', {
    host: config.host,
    port: address?.port ?? config.port,
    policies: config.policies,
    ...(config.modelName ? { model: config.modelName } : {}),
  });
  return app;
}

if (require.main === module) {
  Promise.resolve()
    .then(() => bootstrap(process.env))
    .catch((e: unknown) => {
      new Logger('serve').error('srpo serve failed to start', {
        error: errorMessage(e),
        code: e instanceof SrpoError ? e.code : undefined,
        field: e instanceof SrpoError ? e.field : undefined,
      });
      process.exit(1);
    });
}
