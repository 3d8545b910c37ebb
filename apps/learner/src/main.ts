import 'reflect-metadata';
import type { Server } from 'http';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { errorMessage, holdIdleConnections, Logger, NestLoggerAdapter, SrpoError } from '@srpo/core';
import { applyLearnerConfig, loadLearnerConfig } from './learner-config';
import { LearnerModule } from './learner.module';

/** Boots the learner: config (fails fast), backend, store, restore, HTTP API. */
export async function bootstrap(env: Readonly<Record<string, string | undefined>> = process.env): Promise<INestApplication> {
  const config = loadLearnerConfig(env);
  applyLearnerConfig(config);
  const app = await NestFactory.create(LearnerModule.forRoot(config), { logger: new NestLoggerAdapter(), abortOnError: false });
  app.enableShutdownHooks();
  // An explicit host: Nest's default is every interface, which would expose the API beyond this machine.
  holdIdleConnections(app.getHttpServer() as Server);
  await app.listen(config.httpPort, config.httpHost);
  new Logger('learner').info('HTTP API listening', { host: config.httpHost, port: config.httpPort, policyId: config.policyId });
  return app;
}

if (require.main === module) {
  bootstrap().catch((e: unknown) => {
    new Logger('learner').error('learner failed to start', {
      error: errorMessage(e),
      code: e instanceof SrpoError ? e.code : undefined,
      field: e instanceof SrpoError ? e.field : undefined,
    });
    process.exit(1);
  });
}
