import { EnvReader, SrpoError, tfBackendSettings, type TfBackendSettings } from '@srpo/core';
import { bad, failure, ok, TF_CHILD_MS } from './check-support';
import type { DoctorHost, DoctorResult } from './doctor-host';

/**
 * libtensorflow and the backend SRPO_BACKEND selects, loaded in a child process (the host's
 * `backendModule`), so a crashing libtensorflow is reported, not fatal.
 */

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

export function checkTensorflow(host: DoctorHost): DoctorResult[] {
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
