import { execFileSync, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';

/**
 * First-run paths of the installers, which a warm cache never takes. `.ci/run` runs the whole
 * set-up from empty caches; these tests pin down the paths that broke before, cheaply and on
 * every run: the libtensorflow archive built and served from an empty cache (its RETURN trap
 * once fired again after `build` had returned, so the first run died and only the second,
 * cached one passed), and the not-root path of the system-package installers.
 */
const infra = (...p: string[]) => path.join(repoRoot(), 'infra', ...p);

/** A stand-in for the tensorflow-cpu wheel: a zip with every path the build extracts. */
function fakeWheel(dir: string, name: string): void {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-fake-wheel-'));
  const files = [
    'tensorflow/libtensorflow_cc.so.2',
    'tensorflow/libtensorflow_framework.so.2',
    'tensorflow/include/tensorflow/c/c_api.h',
    'tensorflow/include/tensorflow/c/eager/c_api.h',
    'tensorflow/include/tensorflow/core/platform/ctstring.h',
    'tensorflow/include/tsl/platform/ctstring.h',
    'tensorflow/include/external/local_xla/xla/tsl/c/tsl_status.h',
  ];
  for (const f of files) {
    fs.mkdirSync(path.dirname(path.join(root, f)), { recursive: true });
    fs.writeFileSync(path.join(root, f), `fake ${f}\n`);
  }
  fs.mkdirSync(dir, { recursive: true });
  execFileSync('python3', ['-c', 'import shutil,sys; shutil.make_archive(sys.argv[1], "zip", sys.argv[2])', path.join(dir, name), root]);
  fs.renameSync(path.join(dir, `${name}.zip`), path.join(dir, name));
  fs.rmSync(root, { recursive: true, force: true });
}

describe('first run of the installers (empty caches)', () => {
  it('libtensorflow.sh serve builds the archive from an empty cache and serves it, on the first try', async () => {
    const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-first-run-'));
    fakeWheel(path.join(cache, 'wheels'), 'tensorflow_cpu-9.9.9-cp311-cp311-manylinux_2_27_x86_64.whl');
    const portfile = path.join(cache, 'port');
    // Output to a file, not a pipe: the server left in the background keeps a pipe open, and
    // spawnSync would wait for it until its timeout.
    const logFile = path.join(cache, 'serve.log');
    const fd = fs.openSync(logFile, 'w');
    const r = spawnSync('bash', [infra('tensorflow', 'libtensorflow.sh'), 'serve', portfile], {
      env: { PATH: process.env.PATH ?? '', HOME: cache, SRPO_CACHE_DIR: cache, SRPO_TF_WHEEL_VERSION: '9.9.9' },
      stdio: ['ignore', fd, fd],
      timeout: 60_000,
    });
    fs.closeSync(fd);
    let pid = 0;
    try {
      expect(r.error).toBeUndefined();
      expect(fs.readFileSync(logFile, 'utf8')).not.toMatch(/unbound variable/);
      expect(r.status).toBe(0);
      const [pidText, port] = fs.readFileSync(portfile, 'utf8').trim().split(' ');
      pid = Number(pidText);
      const res = await fetch(`http://127.0.0.1:${port}/libtensorflow-cpu-linux-x86_64-2.9.1.tar.gz`);
      expect(res.status).toBe(200);
      const tgz = path.join(cache, 'got.tar.gz');
      fs.writeFileSync(tgz, Buffer.from(await res.arrayBuffer()));
      const listing = execFileSync('tar', ['-tzf', tgz], { encoding: 'utf8' }).split('\n');
      // The names tfjs-node's installer links against, laid out as it expects.
      for (const f of ['lib/libtensorflow.so.2.9.1', 'lib/libtensorflow.so', 'lib/libtensorflow_framework.so.2', 'include/tensorflow/c/c_api.h']) {
        expect(listing).toContain(f);
      }
      // The temporary build directory is gone, with no error from a trap.
      expect(fs.readdirSync(cache).filter((f) => f.startsWith('libtf-build.'))).toEqual([]);
    } finally {
      if (pid > 0) process.kill(pid, 'SIGTERM');
      fs.rmSync(cache, { recursive: true, force: true });
    }
  });

  it('without root and without passwordless sudo, the system-package installers skip with the command to run as root', () => {
    // A PATH with bash and the basics but no sudo; as root, the check runs as `nobody`.
    const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-nosudo-'));
    for (const tool of ['bash', 'id', 'dirname', 'cat']) {
      const at = execFileSync('bash', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim();
      fs.symlinkSync(at, path.join(bin, tool));
    }
    fs.chmodSync(bin, 0o755);
    const script = `. ${infra('lib', 'privileged.sh')}; privileged "Chromium (optional)" "apt-get install chromium"`;
    const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
    // runuser by its full path: the child's PATH (the narrowed one) is where spawn looks it up.
    const runuser = asRoot ? execFileSync('bash', ['-c', 'command -v runuser'], { encoding: 'utf8' }).trim() : '';
    const cmd = asRoot ? [runuser, ['-u', 'nobody', '--', path.join(bin, 'bash'), '-c', script]] : [path.join(bin, 'bash'), ['-c', script]];
    const r = spawnSync(cmd[0] as string, cmd[1] as string[], { env: { PATH: bin }, encoding: 'utf8', timeout: 10_000 });
    fs.rmSync(bin, { recursive: true, force: true });
    expect(r.error).toBeUndefined();
    expect(r.status).toBe(3);
    expect(r.stderr).toMatch(/not root and no passwordless sudo: Chromium \(optional\) skipped; to install it, run as root: apt-get install chromium/);
  });
});
