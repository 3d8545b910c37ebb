import { Command } from 'commander';
import { EnvReader, errorMessage, Logger, repoRoot } from '@srpo/core';
import { createKafka, readKafkaConnection } from '@srpo/events';
import { runDoctor } from '../doctor/doctor';
import type { ProbeOutcome } from '../doctor/doctor-host';
import { doctorExitCode, formatDoctorJson, formatDoctorReport } from '../doctor/doctor-report';
import { systemDoctorHost } from '../doctor/system-doctor-host';

/**
 * `srpo doctor [--json]`: checks the prerequisites and prints, for each one
 * missing or wrong, the line that fixes it. Exit 1 when a required item fails.
 *
 * It takes the environment rather than the CLI config: loadCliConfig throws on
 * the first bad variable, and the doctor should report that variable among
 * everything else instead of stopping there.
 */
export function doctorCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('doctor')
    .description(
      'check Node, Java, Maven, Python, compilers, node_modules, libtensorflow, Kafka, PostgreSQL, Chromium and Vulkan; print the fix for each problem',
    )
    .option('--json', 'print [{name, level, ok, detail, fix}] instead of one line per check')
    .action(async (opts: { json?: boolean }) => {
      const host = systemDoctorHost({ env, root: repoRoot(), kafkaCluster: (timeoutMs) => describeCluster(env, timeoutMs) });
      const results = await runDoctor(host);
      process.stdout.write(opts.json ? formatDoctorJson(results) : formatDoctorReport(results));
      process.exitCode = doctorExitCode(results);
    });
}

/** kafkajs reports connection failures through the logger as well as the rejection; the rejection is enough here. */
class SilentLogger extends Logger {
  override debug(): void {}
  override info(): void {}
  override warn(): void {}
  override error(): void {}
}

/**
 * describeCluster against KAFKA_BROKERS with the apps' own connection
 * variables (TLS, SASL), no retries and a hard deadline, so an unreachable or
 * black-holed cluster costs seconds, not kafkajs's default minute of retries.
 */
async function describeCluster(env: Readonly<Record<string, string | undefined>>, timeoutMs: number): Promise<ProbeOutcome> {
  let admin: ReturnType<ReturnType<typeof createKafka>['admin']>;
  try {
    const options = readKafkaConnection(new EnvReader(env), 'srpo-doctor');
    admin = createKafka({ ...options, connectionTimeoutMs: 3000, requestTimeoutMs: 5000, retries: 0 }, new SilentLogger('kafkajs')).admin();
  } catch (e) {
    return { ok: false, detail: errorMessage(e) };
  }
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<ProbeOutcome>((resolve) => {
    timer = setTimeout(() => resolve({ ok: false, detail: `no answer within ${Math.round(timeoutMs / 1000)}s` }), timeoutMs);
  });
  const probe = (async (): Promise<ProbeOutcome> => {
    try {
      await admin.connect();
      const cluster = await admin.describeCluster();
      return {
        ok: true,
        detail: `cluster ${cluster.clusterId}: ${cluster.brokers.length} broker(s) at ${cluster.brokers.map((b) => `${b.host}:${b.port}`).join(',')}`,
      };
    } catch (e) {
      return { ok: false, detail: `not reachable: ${errorMessage(e)}` };
    }
  })();
  try {
    return await Promise.race([probe, deadline]);
  } finally {
    clearTimeout(timer);
    await admin.disconnect().catch(() => undefined);
  }
}
