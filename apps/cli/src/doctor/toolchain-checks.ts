import * as path from 'path';
import { apt, asRoot, bad, type Check, failure, firstLine, NODE_FIX, ok, SHORT_MS, toolFailure } from './check-support';
import type { DoctorHost, DoctorResult } from './doctor-host';
import { javaMajor, parseVersion, satisfiesRange, setupStampHash } from './version-parsing';

/** Node, npm, Java, Maven, Python (and its reference packages), the compilers and node_modules. */

export function checkNode(host: DoctorHost): DoctorResult[] {
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

export function checkNpm(host: DoctorHost): DoctorResult[] {
  const out = host.run('npm', ['--version'], { timeoutMs: SHORT_MS });
  if (out.status !== 0) return [bad('npm', 'required', toolFailure('npm', out, SHORT_MS), asRoot(host, NODE_FIX), out.error !== 'ENOENT')];
  const version = firstLine(out.stdout);
  const major = parseVersion(version)?.[0] ?? 0;
  if (major < 10) return [bad('npm', 'required', `${version} (npm 10 or newer is needed for the lockfile)`, 'npm install -g npm@10')];
  return [ok('npm', 'required', version)];
}

export function checkJava(host: DoctorHost): DoctorResult[] {
  const fix = apt(host, 'openjdk-17-jre-headless');
  const out = host.run('java', ['-version'], { timeoutMs: SHORT_MS });
  if (out.status !== 0)
    return [bad('java', 'required', `${toolFailure('java', out, SHORT_MS)} (the local Kafka broker needs Java 17+)`, fix, out.error !== 'ENOENT')];
  const text = `${out.stderr}\n${out.stdout}`;
  const major = javaMajor(text);
  const version = /version "([^"]+)"/.exec(text)?.[1] ?? 'unknown version';
  if (major === undefined || major < 17) return [bad('java', 'required', `${version} (the local Kafka broker needs Java 17+)`, fix)];
  return [ok('java', 'required', version)];
}

/**
 * The Python reference the Hugging Face checks load exports into (torch, transformers, peft,
 * safetensors), the `openai` client the serve and gateway tests drive, and `gguf`, which
 * scripts/models/make-smollm2.py needs to convert the real model. Optional for the
 * demo; the tests that need it fail naming the same command.
 */
export function checkPythonReference(host: DoctorHost): DoctorResult[] {
  const probe =
    'import torch, transformers, peft, safetensors, openai, gguf; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)';
  // Importing torch takes seconds on a cold disk.
  const out = host.run('python3', ['-c', probe], { timeoutMs: 120_000 });
  const m = /^torch (\S+) transformers (\S+) peft (\S+)/m.exec(out.stdout);
  if (out.status === 0 && m) return [ok('python-reference', 'optional', `torch ${m[1]}, transformers ${m[2]}, peft ${m[3]}`)];
  const why =
    out.status === 0 ? 'unexpected output' : (/No module named '([^']+)'/.exec(out.stderr)?.[0] ?? failure('python3 -c "import torch, …"', out, 120_000));
  return [
    bad(
      'python-reference',
      'optional',
      `${why} (optional: the Hugging Face reference and OpenAI-client tests; about 4 GB)`,
      'python3 -m pip install -r scripts/reference/requirements.txt',
      false,
    ),
  ];
}

export function checkMaven(host: DoctorHost): DoctorResult[] {
  const out = host.run('mvn', ['--version', '-B'], { timeoutMs: 30_000 });
  if (out.status !== 0) {
    return [
      bad('mvn', 'required', `${toolFailure('mvn', out, 30_000)} (fetches the Kafka jars from Maven Central)`, apt(host, 'maven'), out.error !== 'ENOENT'),
    ];
  }
  const m = /Apache Maven (\S+)/.exec(out.stdout);
  return [ok('mvn', 'required', m ? m[1] : firstLine(out.stdout))];
}

export function checkPython(host: DoctorHost): DoctorResult[] {
  const out = host.run('python3', ['--version'], { timeoutMs: SHORT_MS });
  if (out.status !== 0) {
    return [
      bad(
        'python3',
        'required',
        `${toolFailure('python3', out, SHORT_MS)} (offline libtensorflow route, Python example)`,
        apt(host, 'python3 python3-pip'),
        out.error !== 'ENOENT',
      ),
    ];
  }
  const version = firstLine(out.stdout || out.stderr).replace(/^Python\s+/, '');
  const pip = host.run('python3', ['-m', 'pip', '--version'], { timeoutMs: 30_000 });
  if (pip.status !== 0) {
    // A system Python gets pip from apt (Debian blocks ensurepip there); pyenv, venvs and the like bootstrap it.
    const where = host.which('python3') ?? '';
    const system = where.startsWith('/usr/bin/') || where.startsWith('/bin/');
    return [
      bad(
        'python3',
        'required',
        `Python ${version} but no pip (${failure('python3 -m pip', pip, 30_000)})`,
        system ? apt(host, 'python3-pip') : 'python3 -m ensurepip --upgrade',
        false,
      ),
    ];
  }
  const pipVersion = /^pip (\S+)/.exec(pip.stdout)?.[1] ?? '?';
  return [ok('python3', 'required', `${version}, pip ${pipVersion}`)];
}

export function checkCompiler(command: 'g++' | 'make'): Check {
  return (host) => {
    const out = host.run(command, ['--version'], { timeoutMs: SHORT_MS });
    if (out.status !== 0) {
      return [
        bad(
          command,
          'required',
          `${toolFailure(command, out, SHORT_MS)} (native addons are built on npm install)`,
          apt(host, 'g++ make'),
          out.error !== 'ENOENT',
        ),
      ];
    }
    const line = firstLine(out.stdout);
    return [ok(command, 'required', /(\d+\.\d+(?:\.\d+)?)\s*$/.exec(line)?.[1] ?? line)];
  };
}

export function checkNodeModules(host: DoctorHost): DoctorResult[] {
  const stamp = host.readText(path.join(host.root, 'node_modules', '.srpo-setup-stamp'));
  if (stamp === undefined) return [bad('node_modules', 'required', 'not installed (no node_modules/.srpo-setup-stamp)', 'npm run setup', false)];
  const lock = host.readText(path.join(host.root, 'package-lock.json'));
  const pkg = host.readText(path.join(host.root, 'package.json'));
  const results = [ok('node_modules', 'required', 'installed by npm run setup')];
  // Stale is a warning, not a failure: what is installed usually still works, and a
  // required failure here would break every run while package.json is being edited.
  const patchDir = path.join(host.root, 'patches');
  const patches = host.listDir(patchDir).map((name) => ({ name, text: host.readText(path.join(patchDir, name)) ?? '' }));
  if (lock !== undefined && pkg !== undefined && stamp.trim() !== setupStampHash(lock, pkg, patches)) {
    results.push(bad('node_modules-current', 'optional', 'package.json, package-lock.json or patches/ changed since the last npm run setup', 'npm run setup'));
  }
  return results;
}
