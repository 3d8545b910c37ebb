import { asRoot } from './check-support';
import { runDoctor } from './doctor';
import type { CommandOutcome, DoctorHost, DoctorResult } from './doctor-host';
import { doctorExitCode, formatDoctorJson, formatDoctorReport } from './doctor-report';
import { javaMajor, satisfiesRange, setupStampHash } from './version-parsing';

const ENGINES = '>=20.11 <21 || >=22';

describe('doctor: version and value parsing', () => {
  it('checks Node against the engines range of package.json', () => {
    expect(satisfiesRange('20.20.2', ENGINES)).toBe(true);
    expect(satisfiesRange('20.11.0', ENGINES)).toBe(true);
    expect(satisfiesRange('22.0.0', ENGINES)).toBe(true);
    expect(satisfiesRange('20.10.9', ENGINES)).toBe(false);
    expect(satisfiesRange('21.7.3', ENGINES)).toBe(false);
    expect(satisfiesRange('18.19.1', ENGINES)).toBe(false);
    expect(() => satisfiesRange('20.0.0', '^20')).toThrow(/unsupported/);
  });

  it('reads the Java major version from both numbering schemes', () => {
    expect(javaMajor('openjdk version "17.0.15" 2025-04-15')).toBe(17);
    expect(javaMajor('openjdk version "21" 2023-09-19')).toBe(21);
    expect(javaMajor('java version "1.8.0_292"')).toBe(8);
    expect(javaMajor('nothing here')).toBeUndefined();
  });

  it('computes the same stamp as setup.sh', () => {
    // printf '{}' > package-lock.json; printf '{"a":1}' > package.json;
    // sha256sum package-lock.json package.json | sha256sum | cut -c1-16
    expect(setupStampHash('{}', '{"a":1}')).toBe('63d2cdb9f22697b1');
    // ... and with patches/a.patch ('y') and patches/b.patch ('x'), listed by the glob patches/* (sorted):
    // sha256sum package-lock.json package.json patches/* | sha256sum | cut -c1-16
    expect(
      setupStampHash('{}', '{"a":1}', [
        { name: 'b.patch', text: 'x' },
        { name: 'a.patch', text: 'y' },
      ]),
    ).toBe('b8ea1f110c43eab1');
  });

  it('prefixes system fixes by who can run them', () => {
    const which = (has: boolean) => (c: string) => (has && c === 'sudo' ? '/usr/bin/sudo' : undefined);
    expect(asRoot({ uid: 0, which: which(false) }, 'apt-get install -y maven')).toBe('apt-get install -y maven');
    expect(asRoot({ uid: 1000, which: which(true) }, 'apt-get install -y maven')).toBe('sudo apt-get install -y maven');
    expect(asRoot({ uid: 1000, which: which(true) }, 'a | b')).toBe("sudo bash -c 'a | b'");
    expect(asRoot({ uid: 1000, which: which(false) }, 'apt-get install -y maven')).toBe('as root: apt-get install -y maven');
  });
});

describe('doctor: report and exit code', () => {
  const results: DoctorResult[] = [
    { name: 'node', level: 'required', ok: true, detail: '20.20.2' },
    { name: 'java', level: 'required', ok: false, detail: 'java not found on PATH', fix: 'apt-get install -y openjdk-17-jre-headless', found: false },
    { name: 'chromium', level: 'optional', ok: false, detail: 'not found (optional: dashboard browser test)', fix: 'infra/chromium/install.sh', found: false },
    { name: 'kafka-broker', level: 'info', ok: false, detail: 'local broker stopped', fix: 'npx srpo kafka start' },
  ];

  it('prints one line per check with the fix for failed ones, then a summary', () => {
    const lines = formatDoctorReport(results).trimEnd().split('\n');
    expect(lines).toEqual([
      'ok      node 20.20.2',
      'MISSING java java not found on PATH — fix: apt-get install -y openjdk-17-jre-headless',
      'warn    chromium not found (optional: dashboard browser test) — fix: infra/chromium/install.sh',
      'info    kafka-broker local broker stopped — fix: npx srpo kafka start',
      'srpo doctor: 1 required item missing or wrong (1 optional item missing)',
    ]);
  });

  it('fails only on required checks', () => {
    expect(doctorExitCode(results)).toBe(1);
    expect(doctorExitCode(results.filter((r) => r.name !== 'java'))).toBe(0);
    expect(formatDoctorReport(results.filter((r) => r.name !== 'java'))).toMatch(/all required items present/);
  });

  it('prints JSON with exactly name, level, ok, detail, fix', () => {
    const parsed = JSON.parse(formatDoctorJson(results)) as Record<string, unknown>[];
    expect(parsed).toHaveLength(4);
    expect(parsed[0]).toEqual({ name: 'node', level: 'required', ok: true, detail: '20.20.2', fix: null });
    expect(parsed[1]).toEqual({
      name: 'java',
      level: 'required',
      ok: false,
      detail: 'java not found on PATH',
      fix: 'apt-get install -y openjdk-17-jre-headless',
    });
  });
});

describe('doctor: decisions on a fake host', () => {
  const done = (stdout: string, stderr = ''): CommandOutcome => ({ status: 0, signal: null, stdout, stderr });
  const absent: CommandOutcome = { status: null, signal: null, stdout: '', stderr: '', error: 'ENOENT' };
  const tfLines = [
    JSON.stringify({ step: 'load', tfjs: '4.22.0', native: '2.21.0', backend: 'tensorflow' }),
    JSON.stringify({ step: 'backend', name: 'tensorflow', package: '@tensorflow/tfjs-node', gpu: false }),
  ].join('\n');

  const MODEL = '/home/u/.cache/srpo/models/smollm2-135m-instruct';

  /** A healthy machine; `over` replaces individual commands' outcomes by command name. */
  function host(over: Record<string, CommandOutcome> = {}, extra: Partial<DoctorHost> = {}): DoctorHost {
    const answers: Record<string, CommandOutcome> = {
      npm: done('10.8.2\n'),
      java: done('', 'openjdk version "17.0.15" 2025-04-15\n'),
      mvn: done('Apache Maven 3.8.7\n'),
      python3: done('Python 3.11.9\n'),
      'g++': done('g++ (Debian 12.2.0-14) 12.2.0\n'),
      make: done('GNU Make 4.3\n'),
      node: done(tfLines),
      bash: { status: 1, signal: null, stdout: 'stopped\n', stderr: '' },
      ...over,
    };
    const files: Record<string, string> = {
      '/repo/package.json': JSON.stringify({ engines: { node: ENGINES } }),
      '/repo/package-lock.json': '{}',
      '/repo/node_modules/.srpo-setup-stamp': setupStampHash('{}', JSON.stringify({ engines: { node: ENGINES } })),
    };
    return {
      env: { PATH: '/usr/bin', HOME: '/home/u' },
      root: '/repo',
      nodeVersion: '20.20.2',
      nodePath: 'node',
      uid: 1000,
      backendModule: '/repo/dist/libs/core/src/tf-backend.js',
      run: (command, args) => {
        if (command === 'python3' && args[0] === '-m') return answers['pip'] ?? done('pip 24.0 from /x\n');
        if (command === 'python3' && args[0] === '-c') return answers['python-reference'] ?? done('torch 2.15.0+cu132 transformers 5.24.0 peft 0.21.2\n');
        if (command === 'bash' && args[0].endsWith('install.sh'))
          return answers['webgpu'] ?? { status: 0, signal: null, stdout: '', stderr: '[webgpu] Vulkan loader and lavapipe present\n' };
        return answers[command] ?? absent;
      },
      which: (c) => (c === 'python3' ? '/usr/bin/python3' : undefined),
      exists: (f) => f.endsWith('/.complete') || f === MODEL || f.startsWith(`${MODEL}/`),
      isExecutable: (f) => f === '/usr/bin/chromium' || f === '/usr/lib/postgresql/15/bin/pg_ctl',
      readText: (f) => files[f],
      listDir: (d) => (d === '/usr/lib/postgresql' ? ['15'] : []),
      kafkaCluster: () => Promise.reject(new Error('must not be called without KAFKA_BROKERS')),
      ...extra,
    };
  }
  const byName = (rs: DoctorResult[], name: string) => rs.find((r) => r.name === name);

  it('passes a healthy machine, with the local broker stopped as information only', async () => {
    const rs = await runDoctor(host());
    expect(rs.filter((r) => !r.ok).map((r) => r.name)).toEqual(['kafka-broker']);
    expect(byName(rs, 'libtensorflow')?.detail).toBe('2.21.0 (tfjs 4.22.0, backend tensorflow)');
    expect(byName(rs, 'tf-backend')?.detail).toMatch(/SRPO_BACKEND=auto selects tensorflow/);
    expect(byName(rs, 'kafka-broker')).toMatchObject({ level: 'info', fix: 'npx srpo kafka start' });
    expect(doctorExitCode(rs)).toBe(0);
  });

  it('reports the Python reference packages, and their install command when one is missing (optional)', async () => {
    expect(byName(await runDoctor(host()), 'python-reference')).toMatchObject({
      ok: true,
      level: 'optional',
      detail: 'torch 2.15.0+cu132, transformers 5.24.0, peft 0.21.2',
    });
    const missing = { status: 1, signal: null, stdout: '', stderr: "Traceback (most recent call last):\nModuleNotFoundError: No module named 'peft'\n" };
    const rs = await runDoctor(host({ 'python-reference': missing }));
    expect(byName(rs, 'python-reference')).toMatchObject({
      ok: false,
      level: 'optional',
      detail: expect.stringContaining("No module named 'peft'"),
      fix: 'python3 -m pip install -r scripts/reference/requirements.txt',
    });
    expect(doctorExitCode(rs)).toBe(0);
  });

  it('reports the SmolLM2 directory where setup makes it, and the command that makes it when absent (optional)', async () => {
    const files = (present: string) => (f: string) => f === present || f.startsWith(`${present}/`);
    expect(byName(await runDoctor(host()), 'smollm2')).toMatchObject({ ok: true, level: 'optional', detail: MODEL });
    // SRPO_CACHE_DIR moves it (CI's fresh cache), SRPO_SMOLLM2_DIR names it outright.
    const cached = await runDoctor(host({}, { env: { PATH: '/usr/bin', HOME: '/home/u', SRPO_CACHE_DIR: '/ci/cache' }, exists: files('/ci/cache/models') }));
    expect(byName(cached, 'smollm2')).toMatchObject({ ok: true, detail: '/ci/cache/models/smollm2-135m-instruct' });
    const named = await runDoctor(host({}, { env: { PATH: '/usr/bin', HOME: '/home/u', SRPO_SMOLLM2_DIR: '/m/smol' }, exists: files('/m/smol') }));
    expect(byName(named, 'smollm2')).toMatchObject({ ok: true, detail: '/m/smol' });
    const rs = await runDoctor(host({}, { exists: (f) => f.endsWith('/.complete') || (f.startsWith(MODEL) && !f.endsWith('model.safetensors')) }));
    expect(byName(rs, 'smollm2')).toMatchObject({
      ok: false,
      level: 'optional',
      found: false,
      detail: expect.stringContaining(`${MODEL} lacks model.safetensors`),
      fix: 'python3 scripts/models/make-smollm2.py',
    });
    expect(doctorExitCode(rs)).toBe(0);
  });

  it('names missing tools with apt fixes a non-root user without sudo must run as root', async () => {
    const rs = await runDoctor(host({ java: absent, mvn: absent }));
    expect(byName(rs, 'java')).toMatchObject({ ok: false, level: 'required', found: false, fix: 'as root: apt-get install -y openjdk-17-jre-headless' });
    expect(byName(rs, 'mvn')).toMatchObject({ ok: false, fix: 'as root: apt-get install -y maven' });
    expect(doctorExitCode(rs)).toBe(1);
  });

  it('fails Java older than 17 and an unsupported Node', async () => {
    const rs = await runDoctor(host({ java: done('', 'java version "1.8.0_292"\n') }, { nodeVersion: '21.1.0' }));
    expect(byName(rs, 'java')).toMatchObject({ ok: false, detail: expect.stringMatching(/1\.8\.0_292.*17\+/) });
    expect(byName(rs, 'node')).toMatchObject({ ok: false, detail: expect.stringContaining(ENGINES) });
  });

  it('reports a libtensorflow that crashes the child, with the setup fix', async () => {
    const rs = await runDoctor(host({ node: { status: null, signal: 'SIGSEGV', stdout: '', stderr: '' } }));
    expect(byName(rs, 'libtensorflow')).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/SIGSEGV/),
      fix: expect.stringMatching(/^npm run setup.*SRPO_FORCE_INSTALL=1 npm run setup/),
    });
    expect(doctorExitCode(rs)).toBe(1);
  });

  it('validates KAFKA_BROKERS before probing it, and probes a valid one', async () => {
    const kafkaCluster = jest.fn(() => Promise.resolve({ ok: true, detail: 'cluster x: 1 broker(s) at h:9092' }));
    const invalid = await runDoctor(host({}, { env: { KAFKA_BROKERS: 'not-a-broker' }, kafkaCluster }));
    expect(byName(invalid, 'KAFKA_BROKERS')).toMatchObject({ ok: false, level: 'required', detail: '"not-a-broker" is not host:port' });
    const oneBad = await runDoctor(host({}, { env: { KAFKA_BROKERS: 'h:9092,bad' }, kafkaCluster }));
    expect(byName(oneBad, 'KAFKA_BROKERS')?.detail).toBe('"h:9092,bad": "bad" is not host:port');
    expect(byName(invalid, 'kafka-jars')).toBeUndefined();
    expect(kafkaCluster).not.toHaveBeenCalled();
    const valid = await runDoctor(host({}, { env: { KAFKA_BROKERS: 'h:9092' }, kafkaCluster }));
    expect(byName(valid, 'KAFKA_BROKERS')).toMatchObject({ ok: true, detail: 'cluster x: 1 broker(s) at h:9092' });
    expect(kafkaCluster).toHaveBeenCalledTimes(1);
  });

  it('warns, without failing, on optional items', async () => {
    const rs = await runDoctor(
      host(
        { webgpu: { status: 1, signal: null, stdout: '', stderr: '[webgpu] missing: mesa-vulkan-drivers>=25\n' } },
        { env: { PATH: '/usr/bin', SRPO_CHROMIUM: '/nope/chrome' }, isExecutable: () => false, listDir: () => [] },
      ),
    );
    expect(byName(rs, 'chromium')).toMatchObject({ ok: false, level: 'optional', detail: expect.stringContaining('SRPO_CHROMIUM=/nope/chrome') });
    expect(byName(rs, 'vulkan')).toMatchObject({
      ok: false,
      level: 'optional',
      detail: expect.stringContaining('mesa-vulkan-drivers>=25'),
      fix: 'as root: infra/webgpu/install.sh',
    });
    expect(byName(rs, 'postgresql')).toMatchObject({ ok: false, level: 'optional', fix: 'as root: infra/postgres/postgres.sh install' });
    expect(doctorExitCode(rs)).toBe(0);
  });
});
