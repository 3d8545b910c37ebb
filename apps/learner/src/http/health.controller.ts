import { Controller, Get, Inject, ServiceUnavailableException } from '@nestjs/common';
import { errorMessage } from '@srpo/core';
import type { AuditStore } from '@srpo/store';
import type { ConsumptionControl, ConsumptionState } from '../group-source';
import type { KafkaHealth, ProbeResult } from '../kafka-health';
import { LearnerStateService } from '../learner-state.service';
import { AUDIT_STORE, CONSUMPTION_CONTROL, KAFKA_HEALTH } from '../learner-tokens';

export interface HealthReport {
  status: 'ok' | 'unavailable';
  database: ProbeResult;
  kafka: ProbeResult;
  policy: { policyId: string; version: number } | null;
  consumption: ConsumptionState;
}

/** Liveness and dependencies; open even when a read token is configured (probes carry no secrets). */
@Controller('health')
export class HealthController {
  constructor(
    @Inject(AUDIT_STORE) private readonly store: AuditStore,
    @Inject(KAFKA_HEALTH) private readonly kafka: KafkaHealth,
    @Inject(CONSUMPTION_CONTROL) private readonly consumption: ConsumptionControl,
    private readonly state: LearnerStateService,
  ) {}

  /** 200 when the database and Kafka answer, 503 (same body) otherwise. */
  @Get()
  async health(): Promise<HealthReport> {
    const [database, kafka] = await Promise.all([this.probeDatabase(), this.kafka.probe()]);
    let policy: HealthReport['policy'] = null;
    try {
      const s = this.state.current();
      policy = { policyId: s.policyId, version: s.version };
    } catch {
      // Not restored yet: reported as null.
    }
    const report: HealthReport = { status: database.ok && kafka.ok ? 'ok' : 'unavailable', database, kafka, policy, consumption: this.consumption.state() };
    if (report.status !== 'ok') throw new ServiceUnavailableException(report);
    return report;
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
