// `@srpo/kernels/testing`: the kernels' spec helpers, for their own specs and for the specs of
// the libraries that run on them. Test-only (under test/, so outside the build).
export { describeNative } from './describe-native';
export { bits, cascadeColumnSums, composite, cpuUnderTest, firstMismatch, nativeBackend, seededValues } from './fixtures';
