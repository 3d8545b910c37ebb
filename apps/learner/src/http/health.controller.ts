import { Controller, Get, Inject, Req, ServiceUnavailableException } from '@nestjs/common';
import { errorMessage } from '@srpo/core';
import type { AuditStore } from '@srpo/store';
import type { ConsumptionControl, ConsumptionState } from '../group-source';
import type { KafkaHealth, ProbeResult } from '../kafka-health';
import type { LearnerConfig } from '../learner-config';
import { LearnerStateService } from '../learner-state.service';
import { AUDIT_STORE, CONSUMPTION_CONTROL, KAFKA_HEALTH, LEARNER_CONFIG } from '../learner-tokens';
import { readAccess } from './api-token.guard';
import type { HttpRequest as Request } from './http-types';

export interface HealthReport {
  status: 'ok' | 'unavailable';
  database: ProbeResult;
  kafka: ProbeResult;
  policy: { policyId: string; version: number } | null;
  consumption: ConsumptionState;
}

/** What `/health` tells a caller without a token once one is configured: up or not, nothing else. */
export type HealthStatus = Pick<HealthReport, 'status'>;

/**
 * Liveness and dependencies. Probes (srpo up, the demo, orchestrators) carry no token, so the
 * route stays open, but once a token is configured only a caller that presents one gets the
 * report: the probes' details name hosts and paths, and the policy version is audit data.
 */
@Controller('health')
export class HealthController {
  constructor(
    @Inject(LEARNER_CONFIG) private readonly config: LearnerConfig,
    @Inject(AUDIT_STORE) private readonly store: AuditStore,
    @Inject(KAFKA_HEALTH) private readonly kafka: KafkaHealth,
    @Inject(CONSUMPTION_CONTROL) private readonly consumption: ConsumptionControl,
    private readonly state: LearnerStateService,
  ) {}

  /** 200 when the database and Kafka answer, 503 (same body) otherwise; `{ status }` alone without a configured token. */
  @Get()
  async health(@Req() req: Request): Promise<HealthReport | HealthStatus> {
    const report = await this.report();
    const access = readAccess(this.config, req);
    const body: HealthReport | HealthStatus = access === 'open' || access === 'granted' ? report : { status: report.status };
    if (report.status !== 'ok') throw new ServiceUnavailableException(body);
    return body;
  }

  private async report(): Promise<HealthReport> {
    const [database, kafka] = await Promise.all([this.probeDatabase(), this.kafka.probe()]);
    let policy: HealthReport['policy'] = null;
    try {
      const s = this.state.current();
      policy = { policyId: s.policyId, version: s.version };
    } catch {
      // Not restored yet: reported as null.
    }
    return { status: database.ok && kafka.ok ? 'ok' : 'unavailable', database, kafka, policy, consumption: this.consumption.state() };
  }

  private async probeDatabase(): Promise<ProbeResult> {
    const started = Date.now();
    try {
      await this.store.ping();
      return { ok: true, detail: 'reachable', latencyMs: Date.now() - started };
    } catch (e) {
      return { ok: false, detail: errorMessage(e), latencyMs: Date.now() - started };
    }
  }
}
