import { DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { initTfBackend } from '@srpo/core';
import { createKafka, EventCodec, topicCatalog } from '@srpo/events';
import { AuditService } from '@srpo/audit';
import { AuditStore, KeyStore } from '@srpo/store';
import { KafkaLearnerEventsPublisher, LearnerMetrics, TfPolicyTrainer } from '@srpo/trainer';
import { FaultInjector } from './fault-injection';
import { KafkaGroupSource } from './kafka-group-source';
import { ConsumptionController } from './http/consumption.controller';
import { HealthController } from './http/health.controller';
import { MetricsController } from './http/metrics.controller';
import { PoliciesController } from './http/policies.controller';
import { SrpoExceptionFilter } from './http/srpo-exception.filter';
import { UpdatesController } from './http/updates.controller';
import { SetsController } from './http/sets.controller';
import { DashboardController } from './http/dashboard.controller';
import { WriteTokenGuard, ReadTokenGuard } from './http/api-token.guard';
import { VerifyGate } from './http/verify-gate';
import { KafkaAdminHealth } from './kafka-health';
import type { LearnerConfig } from './learner-config';
import { LearnerLifecycle } from './learner-lifecycle.service';
import { LearnerStateService } from './learner-state.service';
import {
  AUDIT_SERVICE,
  AUDIT_STORE,
  BACKEND_INFO,
  CLOCK,
  CONSUMPTION_CONTROL,
  EVENTS_PUBLISHER,
  FAULT_INJECTOR,
  GROUP_SOURCE,
  KAFKA_HEALTH,
  LEARNER_CONFIG,
  POLICY_TRAINER,
} from './learner-tokens';
import { UpdateService } from './update.service';
import { backendLabel } from '@srpo/kernels';

/**
 * The learner application. Every outside dependency sits behind a token
 * (store, trainer, publisher, Kafka health, group source, consumption
 * control, clock, fault injector), so tests override exactly what they must.
 */
@Module({})
export class LearnerModule {
  static forRoot(config: LearnerConfig): DynamicModule {
    return {
      module: LearnerModule,
      controllers: [HealthController, MetricsController, PoliciesController, UpdatesController, SetsController, ConsumptionController, DashboardController],
      providers: [
        { provide: LEARNER_CONFIG, useValue: config },
        { provide: CLOCK, useValue: () => Date.now() },
        { provide: FAULT_INJECTOR, useFactory: () => new FaultInjector(config.crashAt, undefined, config.slowMicroBatchMs) },
        {
          provide: BACKEND_INFO,
          // Before anything touches TensorFlow: the trainer depends on this.
          useFactory: async () => initTfBackend(config.backend, config.backendSettings),
        },
        { provide: AUDIT_STORE, useFactory: () => AuditStore.open(config.store) },
        {
          provide: POLICY_TRAINER,
          inject: [BACKEND_INFO],
          useFactory: () =>
            new TfPolicyTrainer({
              policyId: config.policyId,
              model: config.model,
              modelDir: config.modelDir,
              lora: config.lora,
              lr: config.lr,
              epochs: config.epochs,
              maxGradNorm: config.maxGradNorm,
              microBatchTokens: config.microBatchTokens,
            }),
        },
        {
          provide: EVENTS_PUBLISHER,
          useFactory: () => new KafkaLearnerEventsPublisher({ kafka: createKafka(config.kafka), topics: topicCatalog(config.topics) }),
        },
        {
          provide: KAFKA_HEALTH,
          // Its own client without retries, so an unreachable cluster shows within the probe timeout.
          useFactory: () => new KafkaAdminHealth(createKafka({ ...config.kafka, retries: 0, connectionTimeoutMs: 2000, requestTimeoutMs: 3000 }), 3000),
        },
        {
          provide: GROUP_SOURCE,
          useFactory: () =>
            new KafkaGroupSource({
              kafka: createKafka(config.kafka),
              codec: new EventCodec(undefined, { registry: config.schemaRegistry }),
              catalog: topicCatalog(config.topics),
              groupId: config.consumerGroupId,
              policyId: config.policyId,
              setsPerUpdate: config.setsPerUpdate,
              sessionTimeoutMs: config.sessionTimeoutMs,
            }),
        },
        { provide: CONSUMPTION_CONTROL, useExisting: GROUP_SOURCE },
        {
          provide: AUDIT_SERVICE,
          inject: [AUDIT_STORE, BACKEND_INFO],
          useFactory: (store: AuditStore, backend: { name: string }) =>
            new AuditService({
              store,
              kafka: createKafka(config.kafka),
              backend: backendLabel(backend),
              codec: new EventCodec(undefined, { registry: config.schemaRegistry }),
              keys: new KeyStore(store.dataSource),
            }),
        },
        LearnerMetrics,
        LearnerStateService,
        UpdateService,
        LearnerLifecycle,
        WriteTokenGuard,
        ReadTokenGuard,
        { provide: VerifyGate, useFactory: () => new VerifyGate() },
        { provide: APP_FILTER, useClass: SrpoExceptionFilter },
      ],
    };
  }
}
