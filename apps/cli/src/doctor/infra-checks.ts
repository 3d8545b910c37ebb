import * as path from 'path';
import { parseBrokerList } from '@srpo/core';
import { asRoot, bad, failure, firstLine, KAFKA_PROBE_MS, ok, rootScript, SHORT_MS } from './check-support';
import type { DoctorHost, DoctorResult } from './doctor-host';
import { compareVersions, parseVersion } from './version-parsing';

/** The services and devices: Kafka (KAFKA_BROKERS or the local broker), PostgreSQL, Chromium, Vulkan. */

export async function checkKafka(host: DoctorHost): Promise<DoctorResult[]> {
  const raw = host.env.KAFKA_BROKERS;
  if (raw !== undefined && raw !== '') {
    const parsed = parseBrokerList(raw);
    if (!parsed.ok) {
      // The problem quotes the bad entry; the whole value only adds something when it lists several.
      const detail = parsed.problem.startsWith(`"${raw.trim()}"`) ? parsed.problem : `"${raw}": ${parsed.problem}`;
      return [bad('KAFKA_BROKERS', 'required', detail, 'export KAFKA_BROKERS=HOST:PORT[,HOST:PORT...]  (or: unset KAFKA_BROKERS for the local broker)')];
    }
    const probe = await host.kafkaCluster(KAFKA_PROBE_MS);
    if (probe.ok) return [ok('KAFKA_BROKERS', 'required', probe.detail)];
    return [
      bad(
        'KAFKA_BROKERS',
        'required',
        `${raw}: ${probe.detail}`,
        'start that cluster or check the KAFKA_SSL*/KAFKA_SASL* variables (or: unset KAFKA_BROKERS && npx srpo kafka start)',
      ),
    ];
  }
  const results: DoctorResult[] = [];
  const kafkaDir = path.join(host.root, 'infra', 'kafka');
  if (host.exists(path.join(kafkaDir, 'target', 'lib', '.complete'))) results.push(ok('kafka-jars', 'required', 'infra/kafka/target/lib'));
  else results.push(bad('kafka-jars', 'required', 'the Kafka broker jars are not fetched (needs mvn)', 'infra/kafka/kafka.sh fetch', false));
  const status = host.run('bash', [path.join(kafkaDir, 'kafka.sh'), 'status'], { timeoutMs: SHORT_MS, cwd: host.root });
  const said = firstLine(status.stdout);
  if (status.status === 0) results.push(ok('kafka-broker', 'info', said || 'running'));
  else {
    const state =
      status.error || status.signal
        ? `unknown: ${failure(status.error === 'ENOENT' ? 'bash' : 'infra/kafka/kafka.sh status', status, SHORT_MS)}`
        : said || 'stopped';
    results.push(bad('kafka-broker', 'info', `local broker ${state} (npm run demo and npm test start it)`, 'npx srpo kafka start'));
  }
  return results;
}

/** As infra/postgres/postgres.sh's bindir(): the newest /usr/lib/postgresql/<v>/bin with an executable pg_ctl. */
export function checkPostgres(host: DoctorHost): DoctorResult[] {
  if (host.env.SRPO_TEST_POSTGRES_URL) return [ok('postgresql', 'optional', 'SRPO_TEST_POSTGRES_URL is set: tests use that server')];
  const base = '/usr/lib/postgresql';
  const versions = host
    .listDir(base)
    .filter((v) => host.isExecutable(path.join(base, v, 'bin', 'pg_ctl')))
    .sort((a, b) => compareVersions(parseVersion(b) ?? [0, 0, 0], parseVersion(a) ?? [0, 0, 0]));
  if (versions.length > 0) return [ok('postgresql', 'optional', `${versions[0]} (${path.join(base, versions[0], 'bin')})`)];
  // Optional, not required: the demo runs without it, and setup (which ends with this check) runs before CI installs it.
  return [
    bad(
      'postgresql',
      'optional',
      `binaries not found in ${base}/*/bin (optional: needed by npm test's PostgreSQL store tests)`,
      asRoot(host, 'infra/postgres/postgres.sh install'),
      false,
    ),
  ];
}

/** As infra/chromium/install.sh's find_binary(): SRPO_CHROMIUM, then Debian's paths. */
export function checkChromium(host: DoctorHost): DoctorResult[] {
  const override = host.env.SRPO_CHROMIUM;
  const candidates = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/lib/chromium/chromium'];
  const fallback = candidates.find((c) => host.isExecutable(c));
  if (override && !host.isExecutable(override)) {
    const then = fallback ? `; the browser test falls back to ${fallback}` : '';
    return [
      bad(
        'chromium',
        'optional',
        `SRPO_CHROMIUM=${override} is not an executable file${then} (optional: dashboard browser test)`,
        fallback ? 'unset SRPO_CHROMIUM' : `unset SRPO_CHROMIUM && ${rootScript(host, 'infra/chromium/install.sh')}`,
        false,
      ),
    ];
  }
  const binary = override || fallback;
  if (!binary) return [bad('chromium', 'optional', 'not found (optional: dashboard browser test)', rootScript(host, 'infra/chromium/install.sh'), false)];
  const out = host.run(binary, ['--version'], { timeoutMs: SHORT_MS });
  const version = out.status === 0 ? firstLine(out.stdout) : '';
  return [ok('chromium', 'optional', version ? `${version} (${binary})` : binary)];
}

/** Runs infra/webgpu/install.sh check, so the doctor and the installer cannot disagree on Mesa >= 25. */
export function checkWebGpu(host: DoctorHost): DoctorResult[] {
  const out = host.run('bash', [path.join(host.root, 'infra', 'webgpu', 'install.sh'), 'check'], { timeoutMs: SHORT_MS, cwd: host.root });
  const said = firstLine(out.stderr).replace(/^\[webgpu\]\s*/, '');
  if (out.status === 0) return [ok('vulkan', 'optional', said || 'Vulkan loader and lavapipe present')];
  const why =
    out.error || out.signal
      ? failure(out.error === 'ENOENT' ? 'bash' : 'infra/webgpu/install.sh check', out, SHORT_MS)
      : said || 'Vulkan loader or lavapipe missing';
  return [bad('vulkan', 'optional', `${why} (optional: WebGPU backend)`, rootScript(host, 'infra/webgpu/install.sh'), false)];
}
