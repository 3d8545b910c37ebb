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
  '^@srpo/(core|events|streams|srpo|policy|store|testing|offline|serving|materializer|trainer|audit|workflows|kernels|hf)$': '<rootDir>/libs/$1/src',
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
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/{apps,libs,bench}/**/*.spec.ts'] },
    { ...common, displayName: 'integration', testMatch: ['<rootDir>/apps/*/test/**/*.int-spec.ts', '<rootDir>/test/**/*.int-spec.ts'] },
  ],
};
