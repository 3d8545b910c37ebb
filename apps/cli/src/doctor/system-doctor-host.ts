import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { TF_BACKEND_MODULE_FILE } from '@srpo/core';
import type { DoctorHost, ProbeOutcome } from './doctor-host';

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
  // The child loads libs/core's compiled tf-backend; run from sources (jest) there is none to load.
  const compiledBackend = TF_BACKEND_MODULE_FILE.endsWith('.js') ? TF_BACKEND_MODULE_FILE : undefined;
  return {
    env,
    root,
    nodeVersion: process.versions.node,
    nodePath: process.execPath,
    uid: typeof process.getuid === 'function' ? process.getuid() : undefined,
    backendModule: compiledBackend && fs.existsSync(compiledBackend) ? compiledBackend : undefined,
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
