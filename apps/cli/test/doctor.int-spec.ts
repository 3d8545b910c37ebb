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

type Run = ReturnType<typeof doctor>;

/** Runs `f` when fewer than `limit` runs started through this limiter are still going. */
function limiter(limit: number): <T>(f: () => Promise<T>) => Promise<T> {
  let running = 0;
  const waiting: (() => void)[] = [];
  return async (f) => {
    if (running >= limit) await new Promise<void>((r) => waiting.push(r));
    running++;
    try {
      return await f();
    } finally {
      running--;
      waiting.shift()?.();
    }
  };
}

describe('npx srpo doctor', () => {
  // Each doctor run takes seconds, most of them importing torch (the python-reference check),
  // and the cases are independent: every run starts up front, two at a time, and each test
  // awaits its own. Two, not all six, so a run on a small machine stays within its test's time.
  let runs: { plain: Run; nodeOnly: Run; badBrokers: Run; badWebGpu: Run; noChromium: Run; json: Run };
  beforeAll(() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-doctor-path-'));
    fs.symlinkSync(process.execPath, path.join(dir, 'node'));
    const slot = limiter(2);
    runs = {
      plain: slot(() => doctor(localEnv())),
      nodeOnly: slot(() => doctor(localEnv({ PATH: dir }))),
      badBrokers: slot(() => doctor(localEnv({ KAFKA_BROKERS: 'not-a-broker' }))),
      badWebGpu: slot(() => doctor(localEnv({ SRPO_WEBGPU_FLAGS: '[1]' }))),
      noChromium: slot(() => doctor(localEnv({ SRPO_CHROMIUM: path.join(os.tmpdir(), 'srpo-no-such-chromium') }))),
      json: slot(() => doctor(localEnv(), '--json')),
    };
  });

  it('passes on this machine: node, java and libtensorflow ok, exit 0', async () => {
    const { code, stdout } = await runs.plain;
    expect(stdout).toMatch(new RegExp(`^ok\\s+node ${process.versions.node.replace(/\./g, '\\.')}$`, 'm'));
    expect(stdout).toMatch(/^ok\s+java \d+/m);
    expect(stdout).toMatch(/^ok\s+libtensorflow \d+\.\d+/m);
    expect(stdout).toMatch(/^ok\s+tf-backend SRPO_BACKEND=auto selects \w+/m);
    expect(stdout).toMatch(/^srpo doctor: all required items present/m);
    expect(code).toBe(0);
  });

  it('names java and mvn with their fix lines, and exits 1, when PATH holds only node', async () => {
    const { code, stdout } = await runs.nodeOnly;
    expect(code).toBe(1);
    expect(stdout).toMatch(/^MISSING\s+java .* — fix: (sudo |as root: )?apt-get install -y openjdk-17-jre-headless$/m);
    expect(stdout).toMatch(/^MISSING\s+mvn .* — fix: (sudo |as root: )?apt-get install -y maven$/m);
    expect(stdout).toMatch(/^MISSING\s+python3 /m);
    // The node on that PATH is still this one, and libtensorflow does not depend on PATH.
    expect(stdout).toMatch(/^ok\s+node /m);
    expect(stdout).toMatch(/^ok\s+libtensorflow /m);
  });

  it('names KAFKA_BROKERS when it is not a host:port list', async () => {
    const { code, stdout } = await runs.badBrokers;
    expect(code).toBe(1);
    expect(stdout).toMatch(/^FAIL\s+KAFKA_BROKERS "not-a-broker" is not host:port — fix: .*KAFKA_BROKERS/m);
  });

  it('names a bad backend variable (SRPO_WEBGPU_FLAGS not a JSON object) with its fix, and exits 1', async () => {
    const { code, stdout } = await runs.badWebGpu;
    expect(stdout).toMatch(
      /^FAIL\s+tf-backend SRPO_BACKEND=auto: invalid configuration SRPO_WEBGPU_FLAGS: expected a JSON object of tfjs flags — fix: correct or unset SRPO_WEBGPU_FLAGS$/m,
    );
    expect(stdout).toMatch(/^ok\s+libtensorflow /m);
    expect(code).toBe(1);
  });

  it('warns, without failing, when SRPO_CHROMIUM names no executable', async () => {
    const { code, stdout } = await runs.noChromium;
    expect(stdout).toMatch(/^warn\s+chromium SRPO_CHROMIUM=\S*srpo-no-such-chromium is not an executable file.* — fix: unset SRPO_CHROMIUM/m);
    expect(code).toBe(0);
  });

  it('prints [{name, level, ok, detail, fix}] with --json', async () => {
    const { code, stdout } = await runs.json;
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
