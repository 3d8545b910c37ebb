import { spawnSync } from 'child_process';
import { createHash } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { EnvReader } from './config';
import { SrpoError } from './errors';
import { parseBrokerList } from './kafka-brokers';
import { tfBackendSettings, type TfBackendSettings } from './tf-backend';

/**
 * `srpo doctor`: checks what the project needs and, for anything missing or
 * wrong, gives the one line that fixes it.
 *
 * Every side effect goes through a {@link DoctorHost} (commands, files, the
 * Kafka probe), so the decisions and the report are unit-testable with a fake
 * host, and the CLI passes {@link systemDoctorHost}. Each command runs with a
 * timeout, so a wedged tool cannot make the doctor hang; native TensorFlow is
 * loaded in a child process, so a crashing libtensorflow is reported, not fatal.
 */

/**
 * `required`: the demo or `npm run setup` cannot work without it (exit code 1).
 * `optional`: one feature or test needs it. `info`: state worth knowing, not a
 * problem (the local broker is started on demand).
 */
export type DoctorLevel = 'required' | 'optional' | 'info';

export interface DoctorResult {
  name: string;
  level: DoctorLevel;
  ok: boolean;
  detail: string;
  /** The shell line that fixes a failed check; absent when ok. */
  fix?: string;
  /** False when the thing is absent (printed as MISSING); a wrong version or value prints as FAIL. */
  found?: boolean;
}

export interface CommandOutcome {
  /** Exit status; null when the command did not start, timed out or died of a signal. */
  status: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  /** `ENOENT` (not on PATH), `ETIMEDOUT`, ... when spawning failed or timed out. */
  error?: string;
}

export interface RunOptions {
  timeoutMs: number;
  cwd?: string;
  /** Replaces the host's environment for this command (PATH lookup included). */
  env?: Readonly<Record<string, string | undefined>>;
}

export interface ProbeOutcome {
  ok: boolean;
  detail: string;
}

/** Everything the checks read from the machine. */
export interface DoctorHost {
  /** The environment the checks judge (and the commands run with). */
  env: Readonly<Record<string, string | undefined>>;
  /** The repository root. */
  root: string;
  /** The running Node.js: its version is what `engines` is checked against. */
  nodeVersion: string;
  nodePath: string;
  /** Effective uid; undefined where the platform has none. Decides `sudo` / `as root:` in fix lines. */
  uid: number | undefined;
  /** Compiled tf-backend module for the child process; undefined when the project is not built. */
  backendModule: string | undefined;
  run(command: string, args: readonly string[], options: RunOptions): CommandOutcome;
  /** The command's path on the host's PATH, or undefined. */
  which(command: string): string | undefined;
  exists(file: string): boolean;
  isExecutable(file: string): boolean;
  readText(file: string): string | undefined;
  listDir(dir: string): string[];
  /** Asks the cluster in KAFKA_BROKERS (with the same TLS/SASL variables as the apps) to describe itself. */
  kafkaCluster(timeoutMs: number): Promise<ProbeOutcome>;
}

const SHORT_MS = 15_000;
/** Loading libtensorflow and probing Dawn takes seconds on a busy machine; a hang must still end. */
const TF_CHILD_MS = 90_000;
const KAFKA_PROBE_MS = 10_000;

// ---------------------------------------------------------------------------
// Pure helpers (exported for the unit test).

/** Parses `20.11`, `v20.20.2`, `22` into [major, minor, patch]; undefined when not a version. */
export function parseVersion(text: string): [number, number, number] | undefined {
  const m = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?/.exec(text.trim());
  if (!m) return undefined;
  return [Number(m[1]), Number(m[2] ?? 0), Number(m[3] ?? 0)];
}

function compare(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

/**
 * Whether `version` satisfies an npm `engines` range made of `||` alternatives
 * of space-separated comparators (`>=20.11 <21 || >=22`). The whole of semver
 * is not needed: package.json only uses these forms, and an unknown form is
 * reported rather than guessed.
 */
export function satisfiesRange(version: string, range: string): boolean {
  const v = parseVersion(version);
  if (!v) return false;
  return range.split('||').some((alt) => {
    const comparators = alt.trim().split(/\s+/).filter((s) => s);
    if (comparators.length === 0) return false;
    return comparators.every((c) => {
      const m = /^(>=|<=|>|<|=)?\s*(v?\d+(?:\.\d+){0,2})$/.exec(c);
      if (!m) throw new Error(`unsupported engines comparator '${c}'`);
      const bound = parseVersion(m[2]);
      if (!bound) return false;
      const d = compare(v, bound);
      switch (m[1] ?? '=') {
        case '>=':
          return d >= 0;
        case '>':
          return d > 0;
        case '<=':
          return d <= 0;
        case '<':
          return d < 0;
        default:
          return d === 0;
      }
    });
  });
}

/** Java's major version from `java -version` output: `"17.0.15"` → 17, `"1.8.0_292"` → 8. */
export function javaMajor(versionOutput: string): number | undefined {
  const m = /version "(\d+)(?:\.(\d+))?[^"]*"/.exec(versionOutput);
  if (!m) return undefined;
  const major = Number(m[1]);
  return major === 1 && m[2] !== undefined ? Number(m[2]) : major;
}

/** setup.sh's stamp: `sha256sum package-lock.json package.json | sha256sum | cut -c1-16`. */
export function setupStampHash(lockText: string, packageText: string): string {
  const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
  const listing = `${sha(lockText)}  package-lock.json\n${sha(packageText)}  package.json\n`;
  return sha(listing).slice(0, 16);
}

/**
 * A system fix line for this user: as is for root, through sudo when there
 * is one, otherwise marked `as root:` (the user cannot run it as they are).
 */
export function asRoot(host: Pick<DoctorHost, 'uid' | 'which'>, line: string): string {
  if (host.uid === 0) return line;
  if (host.which('sudo')) return /[|&;]/.test(line) ? `sudo bash -c '${line}'` : `sudo ${line}`;
  return `as root: ${line}`;
}

/** The repo's install scripts call sudo themselves; only without root and sudo do they need a root shell. */
function rootScript(host: DoctorHost, line: string): string {
  if (host.uid === 0 || host.which('sudo')) return line;
  return `as root: ${line}`;
}

function apt(host: DoctorHost, packages: string): string {
  return asRoot(host, `apt-get install -y ${packages}`);
}

const NODE_FIX = 'curl -fsSL https://deb.nodesource.com/setup_22.x | bash - && apt-get install -y nodejs';

function firstLine(text: string): string {
  return (
    text
      .split('\n')
      .map((l) => l.trim())
      .find((l) => l.length > 0) ?? ''
  );
}

/** Why a command gave no usable answer, in words. */
function failure(command: string, out: CommandOutcome, timeoutMs: number): string {
  if (out.error === 'ENOENT') return `${command} not found on PATH`;
  if (out.error === 'ETIMEDOUT') return `${command} did not answer within ${Math.round(timeoutMs / 1000)}s`;
  if (out.error) return `${command} could not run (${out.error})`;
  if (out.signal) return `${command} died of ${out.signal}`;
  const said = firstLine(out.stderr) || firstLine(out.stdout);
  return `${command} exited ${out.status}${said ? `: ${said}` : ''}`;
}

/** {@link failure} for a check named after its command: the line already names it. */
function toolFailure(command: string, out: CommandOutcome, timeoutMs: number): string {
  return out.error === 'ENOENT' ? 'not found on PATH' : failure(command, out, timeoutMs);
}

function ok(name: string, level: DoctorLevel, detail: string): DoctorResult {
  return { name, level, ok: true, detail };
}

function bad(name: string, level: DoctorLevel, detail: string, fix: string, found = true): DoctorResult {
  return { name, level, ok: false, detail, fix, found };
}

// ---------------------------------------------------------------------------
// Checks.

type Check = (host: DoctorHost) => DoctorResult[] | Promise<DoctorResult[]>;

function checkNode(host: DoctorHost): DoctorResult[] {
  let range = '>=20.11 <21 || >=22';
  const pkgText = host.readText(path.join(host.root, 'package.json'));
  if (pkgText) {
    try {
      const engines = (JSON.parse(pkgText) as { engines?: { node?: unknown } }).engines;
      if (typeof engines?.node === 'string') range = engines.node;
    } catch {
      // A broken package.json fails `npm` loudly on its own; the default range still says what is needed.
    }
  }
  let fits: boolean;
  try {
    fits = satisfiesRange(host.nodeVersion, range);
  } catch (e) {
    return [bad('node', 'required', `${host.nodeVersion}: cannot read engines "${range}" (${(e as Error).message})`, 'fix "engines.node" in package.json')];
  }
  if (fits) return [ok('node', 'required', host.nodeVersion)];
  return [bad('node', 'required', `${host.nodeVersion} does not satisfy engines "${range}"`, asRoot(host, NODE_FIX))];
}

function checkNpm(host: DoctorHost): DoctorResult[] {
  const out = host.run('npm', ['--version'], { timeoutMs: SHORT_MS });
  if (out.status !== 0) return [bad('npm', 'required', toolFailure('npm', out, SHORT_MS), asRoot(host, NODE_FIX), out.error !== 'ENOENT')];
  const version = firstLine(out.stdout);
  const major = parseVersion(version)?.[0] ?? 0;
  if (major < 10) return [bad('npm', 'required', `${version} (npm 10 or newer is needed for the lockfile)`, 'npm install -g npm@10')];
  return [ok('npm', 'required', version)];
}

function checkJava(host: DoctorHost): DoctorResult[] {
  const fix = apt(host, 'openjdk-17-jre-headless');
  const out = host.run('java', ['-version'], { timeoutMs: SHORT_MS });
  if (out.status !== 0) return [bad('java', 'required', `${toolFailure('java', out, SHORT_MS)} (the local Kafka broker needs Java 17+)`, fix, out.error !== 'ENOENT')];
  const text = `${out.stderr}\n${out.stdout}`;
  const major = javaMajor(text);
  const version = /version "([^"]+)"/.exec(text)?.[1] ?? 'unknown version';
  if (major === undefined || major < 17) return [bad('java', 'required', `${version} (the local Kafka broker needs Java 17+)`, fix)];
  return [ok('java', 'required', version)];
}

/**
 * The Python reference the Hugging Face checks load exports into (torch, transformers, peft,
 * safetensors), and the `openai` client the serve and gateway tests drive. Optional for the
 * demo; the tests that need it fail naming the same command.
 */
function checkPythonReference(host: DoctorHost): DoctorResult[] {
  const probe = 'import torch, transformers, peft, safetensors, openai; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)';
  // Importing torch takes seconds on a cold disk.
  const out = host.run('python3', ['-c', probe], { timeoutMs: 120_000 });
  const m = /^torch (\S+) transformers (\S+) peft (\S+)/m.exec(out.stdout);
  if (out.status === 0 && m) return [ok('python-reference', 'optional', `torch ${m[1]}, transformers ${m[2]}, peft ${m[3]}`)];
  const why = out.status === 0 ? 'unexpected output' : (/No module named '([^']+)'/.exec(out.stderr)?.[0] ?? failure('python3 -c "import torch, …"', out, 120_000));
  return [bad('python-reference', 'optional', `${why} (optional: the Hugging Face reference and OpenAI-client tests; about 4 GB)`, 'python3 -m pip install -r scripts/reference/requirements.txt', false)];
}

function checkMaven(host: DoctorHost): DoctorResult[] {
  const out = host.run('mvn', ['--version', '-B'], { timeoutMs: 30_000 });
  if (out.status !== 0) {
    return [bad('mvn', 'required', `${toolFailure('mvn', out, 30_000)} (fetches the Kafka jars from Maven Central)`, apt(host, 'maven'), out.error !== 'ENOENT')];
  }
  const m = /Apache Maven (\S+)/.exec(out.stdout);
  return [ok('mvn', 'required', m ? m[1] : firstLine(out.stdout))];
}

function checkPython(host: DoctorHost): DoctorResult[] {
  const out = host.run('python3', ['--version'], { timeoutMs: SHORT_MS });
  if (out.status !== 0) {
    return [bad('python3', 'required', `${toolFailure('python3', out, SHORT_MS)} (offline libtensorflow route, Python example)`, apt(host, 'python3 python3-pip'), out.error !== 'ENOENT')];
  }
  const version = firstLine(out.stdout || out.stderr).replace(/^Python\s+/, '');
  const pip = host.run('python3', ['-m', 'pip', '--version'], { timeoutMs: 30_000 });
  if (pip.status !== 0) {
    // A system Python gets pip from apt (Debian blocks ensurepip there); pyenv, venvs and the like bootstrap it.
    const where = host.which('python3') ?? '';
    const system = where.startsWith('/usr/bin/') || where.startsWith('/bin/');
    return [bad('python3', 'required', `Python ${version} but no pip (${failure('python3 -m pip', pip, 30_000)})`, system ? apt(host, 'python3-pip') : 'python3 -m ensurepip --upgrade', false)];
  }
  const pipVersion = /^pip (\S+)/.exec(pip.stdout)?.[1] ?? '?';
  return [ok('python3', 'required', `${version}, pip ${pipVersion}`)];
}

function checkCompiler(command: 'g++' | 'make'): Check {
  return (host) => {
    const out = host.run(command, ['--version'], { timeoutMs: SHORT_MS });
    if (out.status !== 0) {
      return [bad(command, 'required', `${toolFailure(command, out, SHORT_MS)} (native addons are built on npm install)`, apt(host, 'g++ make'), out.error !== 'ENOENT')];
    }
    const line = firstLine(out.stdout);
    return [ok(command, 'required', /(\d+\.\d+(?:\.\d+)?)\s*$/.exec(line)?.[1] ?? line)];
  };
}

function checkNodeModules(host: DoctorHost): DoctorResult[] {
  const stamp = host.readText(path.join(host.root, 'node_modules', '.srpo-setup-stamp'));
  if (stamp === undefined) return [bad('node_modules', 'required', 'not installed (no node_modules/.srpo-setup-stamp)', 'npm run setup', false)];
  const lock = host.readText(path.join(host.root, 'package-lock.json'));
  const pkg = host.readText(path.join(host.root, 'package.json'));
  const results = [ok('node_modules', 'required', 'installed by npm run setup')];
  // Stale is a warning, not a failure: what is installed usually still works, and a
  // required failure here would break every run while package.json is being edited.
  if (lock !== undefined && pkg !== undefined && stamp.trim() !== setupStampHash(lock, pkg)) {
    results.push(bad('node_modules-current', 'optional', 'package.json or package-lock.json changed since the last npm run setup', 'npm run setup'));
  }
  return results;
}

/** Runs in the child: one JSON line per step on stdout, so a crash in step 2 keeps step 1's answer. */
const TF_CHILD_SCRIPT = `
const fs = require('fs');
const say = (o) => fs.writeSync(1, JSON.stringify(o) + '\\n');
const first = (e) => String((e && e.message) || e).split('\\n')[0];
let tf;
try { tf = require('@tensorflow/tfjs-node'); } catch (e) { say({ step: 'load', error: first(e) }); process.exit(3); }
say({ step: 'load', tfjs: tf.version.tfjs, native: tf.backend().binding.TF_Version, backend: tf.getBackend() });
const moduleFile = process.argv[1];
if (!moduleFile) process.exit(0);
const core = require(moduleFile);
core.initTfBackend(process.argv[2], JSON.parse(process.argv[3] || '{}')).then((info) => {
  say({ step: 'backend', name: info.name, package: info.package, gpu: info.gpu, nativeVersion: info.nativeVersion,
        adapter: info.adapter ? core.describeAdapter(info.adapter) : undefined });
  try { core.releaseTfBackend(); } catch (e) {}
  process.exit(0);
}, (e) => { say({ step: 'backend', error: first(e) }); process.exit(4); });
`;

interface TfLoadLine {
  step: 'load';
  error?: string;
  tfjs?: string;
  native?: string;
  backend?: string;
}
interface TfBackendLine {
  step: 'backend';
  error?: string;
  name?: string;
  package?: string;
  gpu?: boolean;
  nativeVersion?: string;
  adapter?: string;
}

function parseChildLines(stdout: string): (TfLoadLine | TfBackendLine)[] {
  const lines: (TfLoadLine | TfBackendLine)[] = [];
  for (const l of stdout.split('\n')) {
    if (!l.startsWith('{')) continue;
    try {
      const v = JSON.parse(l) as TfLoadLine | TfBackendLine;
      if (v.step === 'load' || v.step === 'backend') lines.push(v);
    } catch {
      // Not ours (a library printed on stdout).
    }
  }
  return lines;
}

function checkTensorflow(host: DoctorHost): DoctorResult[] {
  const requested = host.env.SRPO_BACKEND || 'auto';
  // The backend's variables as the apps' configs read them; the child gets them as JSON.
  let settings: TfBackendSettings | undefined;
  let settingsError: SrpoError | undefined;
  try {
    settings = tfBackendSettings(new EnvReader(host.env));
  } catch (e) {
    if (!(e instanceof SrpoError)) throw e;
    settingsError = e;
  }
  const args = ['-e', TF_CHILD_SCRIPT, ...(host.backendModule && settings ? [host.backendModule, requested, JSON.stringify(settings)] : [])];
  // libtensorflow's start-up notices on stderr are noise here; a value the user set wins.
  const env = { ...host.env, TF_CPP_MIN_LOG_LEVEL: host.env.TF_CPP_MIN_LOG_LEVEL ?? '2', SRPO_LOG_LEVEL: 'error' };
  const out = host.run(host.nodePath, args, { timeoutMs: TF_CHILD_MS, cwd: host.root, env });
  const lines = parseChildLines(out.stdout);
  const load = lines.find((l): l is TfLoadLine => l.step === 'load');
  const backend = lines.find((l): l is TfBackendLine => l.step === 'backend');
  const fix = 'npm run setup (if it says up to date: SRPO_FORCE_INSTALL=1 npm run setup)';
  const results: DoctorResult[] = [];
  if (!load || load.error) {
    const why = load?.error ?? failure('loading @tensorflow/tfjs-node', out, TF_CHILD_MS);
    results.push(bad('libtensorflow', 'required', `@tensorflow/tfjs-node does not load: ${why}`, fix, false));
    return results;
  }
  results.push(ok('libtensorflow', 'required', `${load.native ?? '?'} (tfjs ${load.tfjs ?? '?'}, backend ${load.backend ?? '?'})`));
  if (!host.backendModule) return results;
  if (settingsError) {
    results.push(bad('tf-backend', 'required', `SRPO_BACKEND=${requested}: ${settingsError.message}`, `correct or unset ${settingsError.field ?? 'it'}`));
  } else if (backend && !backend.error) {
    const where = backend.adapter ? ` on ${backend.adapter}` : backend.gpu ? ' on GPU' : '';
    results.push(ok('tf-backend', 'required', `SRPO_BACKEND=${requested} selects ${backend.name ?? '?'} (${backend.package ?? '?'})${where}`));
  } else {
    const why = backend?.error ?? failure('backend selection', out, TF_CHILD_MS);
    const fixBackend = requested === 'auto' ? fix : `unset SRPO_BACKEND (or fix what it needs: ${why.split(';')[0]})`;
    results.push(bad('tf-backend', 'required', `SRPO_BACKEND=${requested}: ${why}`, fixBackend));
  }
  return results;
}

async function checkKafka(host: DoctorHost): Promise<DoctorResult[]> {
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
    return [bad('KAFKA_BROKERS', 'required', `${raw}: ${probe.detail}`, 'start that cluster or check the KAFKA_SSL*/KAFKA_SASL* variables (or: unset KAFKA_BROKERS && npx srpo kafka start)')];
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
function checkPostgres(host: DoctorHost): DoctorResult[] {
  if (host.env.SRPO_TEST_POSTGRES_URL) return [ok('postgresql', 'optional', 'SRPO_TEST_POSTGRES_URL is set: tests use that server')];
  const base = '/usr/lib/postgresql';
  const versions = host
    .listDir(base)
    .filter((v) => host.isExecutable(path.join(base, v, 'bin', 'pg_ctl')))
    .sort((a, b) => compare(parseVersion(b) ?? [0, 0, 0], parseVersion(a) ?? [0, 0, 0]));
  if (versions.length > 0) return [ok('postgresql', 'optional', `${versions[0]} (${path.join(base, versions[0], 'bin')})`)];
  // Optional, not required: the demo runs without it, and setup (which ends with this check) runs before CI installs it.
  return [bad('postgresql', 'optional', `binaries not found in ${base}/*/bin (optional: needed by npm test's PostgreSQL store tests)`, asRoot(host, 'infra/postgres/postgres.sh install'), false)];
}

/** As infra/chromium/install.sh's find_binary(): SRPO_CHROMIUM, then Debian's paths. */
function checkChromium(host: DoctorHost): DoctorResult[] {
  const override = host.env.SRPO_CHROMIUM;
  const candidates = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/lib/chromium/chromium'];
  const fallback = candidates.find((c) => host.isExecutable(c));
  if (override && !host.isExecutable(override)) {
    const then = fallback ? `; the browser test falls back to ${fallback}` : '';
    return [bad('chromium', 'optional', `SRPO_CHROMIUM=${override} is not an executable file${then} (optional: dashboard browser test)`, fallback ? 'unset SRPO_CHROMIUM' : `unset SRPO_CHROMIUM && ${rootScript(host, 'infra/chromium/install.sh')}`, false)];
  }
  const binary = override || fallback;
  if (!binary) return [bad('chromium', 'optional', 'not found (optional: dashboard browser test)', rootScript(host, 'infra/chromium/install.sh'), false)];
  const out = host.run(binary, ['--version'], { timeoutMs: SHORT_MS });
  const version = out.status === 0 ? firstLine(out.stdout) : '';
  return [ok('chromium', 'optional', version ? `${version} (${binary})` : binary)];
}

/** Runs infra/webgpu/install.sh check, so the doctor and the installer cannot disagree on Mesa >= 25. */
function checkWebGpu(host: DoctorHost): DoctorResult[] {
  const out = host.run('bash', [path.join(host.root, 'infra', 'webgpu', 'install.sh'), 'check'], { timeoutMs: SHORT_MS, cwd: host.root });
  const said = firstLine(out.stderr).replace(/^\[webgpu\]\s*/, '');
  if (out.status === 0) return [ok('vulkan', 'optional', said || 'Vulkan loader and lavapipe present')];
  const why = out.error || out.signal ? failure(out.error === 'ENOENT' ? 'bash' : 'infra/webgpu/install.sh check', out, SHORT_MS) : said || 'Vulkan loader or lavapipe missing';
  return [bad('vulkan', 'optional', `${why} (optional: WebGPU backend)`, rootScript(host, 'infra/webgpu/install.sh'), false)];
}

/** In report order; the name labels a check that throws. */
const CHECKS: readonly (readonly [string, Check])[] = [
  ['node', checkNode],
  ['npm', checkNpm],
  ['java', checkJava],
  ['mvn', checkMaven],
  ['python3', checkPython],
  ['python-reference', checkPythonReference],
  ['g++', checkCompiler('g++')],
  ['make', checkCompiler('make')],
  ['node_modules', checkNodeModules],
  ['libtensorflow', checkTensorflow],
  ['kafka', checkKafka],
  ['postgresql', checkPostgres],
  ['chromium', checkChromium],
  ['vulkan', checkWebGpu],
];

/** Runs every check in order; a check that throws becomes a failed result, so one bug cannot hide the rest. */
export async function runDoctor(host: DoctorHost): Promise<DoctorResult[]> {
  const results: DoctorResult[] = [];
  for (const [name, check] of CHECKS) {
    try {
      results.push(...(await check(host)));
    } catch (e) {
      results.push(bad(name, 'required', `the check itself failed: ${(e as Error).message}`, 'report this as a bug'));
    }
  }
  return results;
}

// ---------------------------------------------------------------------------
// Output.

function tag(r: DoctorResult): string {
  if (r.ok) return 'ok';
  if (r.level === 'info') return 'info';
  if (r.level === 'optional') return 'warn';
  return r.found === false ? 'MISSING' : 'FAIL';
}

/** One line per result, then a summary line. */
export function formatDoctorReport(results: readonly DoctorResult[]): string {
  const lines = results.map((r) => `${tag(r).padEnd(7)} ${r.name} ${r.detail}${!r.ok && r.fix ? ` — fix: ${r.fix}` : ''}`);
  const failed = results.filter((r) => !r.ok && r.level === 'required').length;
  const warned = results.filter((r) => !r.ok && r.level === 'optional').length;
  const warnings = warned ? ` (${warned} optional item${warned === 1 ? '' : 's'} missing)` : '';
  lines.push(failed ? `srpo doctor: ${failed} required item${failed === 1 ? '' : 's'} missing or wrong${warnings}` : `srpo doctor: all required items present${warnings}`);
  return lines.join('\n') + '\n';
}

/** `[{name, level, ok, detail, fix}]`; fix is null for passed checks. */
export function formatDoctorJson(results: readonly DoctorResult[]): string {
  const plain = results.map((r) => ({ name: r.name, level: r.level, ok: r.ok, detail: r.detail, fix: r.ok ? null : (r.fix ?? null) }));
  return JSON.stringify(plain, null, 2) + '\n';
}

/** 1 when a required check failed, else 0: optional and informational items never fail the doctor. */
export function doctorExitCode(results: readonly DoctorResult[]): number {
  return results.some((r) => !r.ok && r.level === 'required') ? 1 : 0;
}

// ---------------------------------------------------------------------------
// The real machine.

/**
 * The host the CLI passes: real commands (spawnSync with a timeout and
 * SIGKILL, so nothing outlives it), real files. `env` is the caller's
 * environment; nothing here reads process.env.
 */
export function systemDoctorHost(options: {
  env: Readonly<Record<string, string | undefined>>;
  root: string;
  kafkaCluster: (timeoutMs: number) => Promise<ProbeOutcome>;
}): DoctorHost {
  const { env, root } = options;
  const isExecutable = (file: string): boolean => {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return fs.statSync(file).isFile();
    } catch {
      return false;
    }
  };
  const compiledBackend = path.join(__dirname, 'tf-backend.js');
  return {
    env,
    root,
    nodeVersion: process.versions.node,
    nodePath: process.execPath,
    uid: typeof process.getuid === 'function' ? process.getuid() : undefined,
    backendModule: fs.existsSync(compiledBackend) ? compiledBackend : undefined,
    run(command, args, runOptions) {
      const r = spawnSync(command, args, {
        cwd: runOptions.cwd ?? root,
        env: { ...(runOptions.env ?? env) },
        timeout: runOptions.timeoutMs,
        killSignal: 'SIGKILL',
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        maxBuffer: 4 * 1024 * 1024,
      });
      const error = r.error ? ((r.error as NodeJS.ErrnoException).code ?? r.error.message) : undefined;
      return { status: r.status, signal: r.signal, stdout: r.stdout ?? '', stderr: r.stderr ?? '', error };
    },
    which(command) {
      for (const dir of (env.PATH ?? '').split(path.delimiter)) {
        if (!dir) continue;
        const candidate = path.join(dir, command);
        if (isExecutable(candidate)) return candidate;
      }
      return undefined;
    },
    exists: (file) => fs.existsSync(file),
    isExecutable,
    readText(file) {
      try {
        return fs.readFileSync(file, 'utf8');
      } catch {
        return undefined;
      }
    },
    listDir(dir) {
      try {
        return fs.readdirSync(dir);
      } catch {
        return [];
      }
    },
    kafkaCluster: options.kafkaCluster,
  };
}
