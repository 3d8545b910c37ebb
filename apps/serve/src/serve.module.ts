import { DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { OpenAiErrorFilter } from '@srpo/serving';
import { CompletionsController, toOpenAiError } from './completions.controller';
import type { ServeConfig } from './serve-config';
import { ServeService } from './serve.service';

@Module({})
export class ServeModule {
  static forRoot(config: ServeConfig): DynamicModule {
    return {
      module: ServeModule,
      controllers: [CompletionsController],
      providers: [
        { provide: ServeService, useFactory: () => new ServeService(config) },
        { provide: APP_FILTER, useValue: new OpenAiErrorFilter(toOpenAiError) },
      ],
    };
  }
}
