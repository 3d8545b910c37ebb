// Unit tests (`*.spec.ts`, beside the code) and integration tests (`apps/*/test/**/*.int-spec.ts`,
// against the real broker and databases that jest.global-setup.js makes sure are running).
// SWC is the transform because it emits decorator metadata, which NestJS injection needs.
const swc = [
  '@swc/jest',
  {
    jsc: {
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
      target: 'es2022',
    },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
  },
];

const moduleNameMapper = {
  '^@srpo/(core|events|streams|srpo|kernels|policy|hf|store|testing|offline|serving|materializer|trainer|audit|workflows|judge)$': '<rootDir>/libs/$1/src',
  // The kernels' bench/test-only entries: the A/B switches, and the spec helpers (under test/).
  '^@srpo/kernels/tuning$': '<rootDir>/libs/kernels/src/tuning',
  '^@srpo/kernels/testing$': '<rootDir>/libs/kernels/src/test',
  // The policy's spec helpers (makeSets, TINY), for the specs of the libraries above it.
  '^@srpo/policy/testing$': '<rootDir>/libs/policy/src/test/fixtures',
};

const common = {
  rootDir: __dirname,
  transform: { '^.+\\.ts$': swc },
  moduleFileExtensions: ['ts', 'js', 'json'],
  moduleNameMapper,
  testEnvironment: 'node',
};

module.exports = {
  // Integration tests wait on a real broker; unit tests finish far sooner.
  testTimeout: 120000,
  globalSetup: '<rootDir>/jest.global-setup.js',
  globalTeardown: '<rootDir>/jest.global-teardown.js',
  // The skip reporter prints how many tests were skipped, and fails the run with SRPO_FAIL_ON_SKIP=1.
  reporters: ['default', '<rootDir>/scripts/jest/skip-reporter.js', '<rootDir>/scripts/jest/slowest-reporter.js'],
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/{apps,libs,bench}/**/*.spec.ts'] },
    { ...common, displayName: 'integration', testMatch: ['<rootDir>/apps/*/test/**/*.int-spec.ts', '<rootDir>/test/**/*.int-spec.ts'] },
  ],
};
