import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';

const run = promisify(execFile);
const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'srpo.js');

/** The environment minus KAFKA_BROKERS, so these cases do not depend on an external cluster being up. */
function localEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, SRPO_LOG_LEVEL: 'error', ...extra };
  if (!('KAFKA_BROKERS' in extra)) delete env.KAFKA_BROKERS;
  return env;
}

async function doctor(env: NodeJS.ProcessEnv, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    // process.execPath: the narrowed-PATH case has no `node` to look up.
    const { stdout, stderr } = await run(process.execPath, [bin, 'doctor', ...args], { env, timeout: 180_000 });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

describe('npx srpo doctor', () => {
  it('passes on this machine: node, java and libtensorflow ok, exit 0', async () => {
    const { code, stdout } = await doctor(localEnv());
    expect(stdout).toMatch(new RegExp(`^ok\\s+node ${process.versions.node.replace(/\./g, '\\.')}$`, 'm'));
    expect(stdout).toMatch(/^ok\s+java \d+/m);
    expect(stdout).toMatch(/^ok\s+libtensorflow \d+\.\d+/m);
    expect(stdout).toMatch(/^ok\s+tf-backend SRPO_BACKEND=auto selects \w+/m);
    expect(stdout).toMatch(/^srpo doctor: all required items present/m);
    expect(code).toBe(0);
  });

  it('names java and mvn with their fix lines, and exits 1, when PATH holds only node', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-doctor-path-'));
    fs.symlinkSync(process.execPath, path.join(dir, 'node'));
    const { code, stdout } = await doctor(localEnv({ PATH: dir }));
    expect(code).toBe(1);
    expect(stdout).toMatch(/^MISSING\s+java .* — fix: (sudo |as root: )?apt-get install -y openjdk-17-jre-headless$/m);
    expect(stdout).toMatch(/^MISSING\s+mvn .* — fix: (sudo |as root: )?apt-get install -y maven$/m);
    expect(stdout).toMatch(/^MISSING\s+python3 /m);
    // The node on that PATH is still this one, and libtensorflow does not depend on PATH.
    expect(stdout).toMatch(/^ok\s+node /m);
    expect(stdout).toMatch(/^ok\s+libtensorflow /m);
  });

  it('names KAFKA_BROKERS when it is not a host:port list', async () => {
    const { code, stdout } = await doctor(localEnv({ KAFKA_BROKERS: 'not-a-broker' }));
    expect(code).toBe(1);
    expect(stdout).toMatch(/^FAIL\s+KAFKA_BROKERS "not-a-broker" is not host:port — fix: .*KAFKA_BROKERS/m);
  });

  it('names a bad backend variable (SRPO_WEBGPU_FLAGS not a JSON object) with its fix, and exits 1', async () => {
    const { code, stdout } = await doctor(localEnv({ SRPO_WEBGPU_FLAGS: '[1]' }));
    expect(stdout).toMatch(
      /^FAIL\s+tf-backend SRPO_BACKEND=auto: invalid configuration SRPO_WEBGPU_FLAGS: expected a JSON object of tfjs flags — fix: correct or unset SRPO_WEBGPU_FLAGS$/m,
    );
    expect(stdout).toMatch(/^ok\s+libtensorflow /m);
    expect(code).toBe(1);
  });

  it('warns, without failing, when SRPO_CHROMIUM names no executable', async () => {
    const { code, stdout } = await doctor(localEnv({ SRPO_CHROMIUM: path.join(os.tmpdir(), 'srpo-no-such-chromium') }));
    expect(stdout).toMatch(/^warn\s+chromium SRPO_CHROMIUM=\S*srpo-no-such-chromium is not an executable file.* — fix: unset SRPO_CHROMIUM/m);
    expect(code).toBe(0);
  });

  it('prints [{name, level, ok, detail, fix}] with --json', async () => {
    const { code, stdout } = await doctor(localEnv(), '--json');
    expect(code).toBe(0);
    const results = JSON.parse(stdout) as { name: string; level: string; ok: boolean; detail: string; fix: string | null }[];
    expect(results.map((r) => r.name)).toEqual(
      expect.arrayContaining(['node', 'npm', 'java', 'mvn', 'python3', 'g++', 'make', 'node_modules', 'libtensorflow']),
    );
    for (const r of results) {
      expect(Object.keys(r).sort()).toEqual(['detail', 'fix', 'level', 'name', 'ok']);
      expect(['required', 'optional', 'info']).toContain(r.level);
      if (!r.ok) expect(typeof r.fix).toBe('string');
    }
    expect(results.find((r) => r.name === 'java')).toMatchObject({ level: 'required', ok: true, fix: null });
  });
});
