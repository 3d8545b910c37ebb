import { loadSrpoKernels } from '../srpo-kernels';

/**
 * `describe` for tests of the native kernels, choosing when the spec file loads:
 * - the addon loaded with every kernel of `kernels`: `describe`;
 * - otherwise `describe.skip`, so that the run reports the tests as skipped instead of passing
 *   them green (scripts/jest/skip-reporter.js counts them, and SRPO_FAIL_ON_SKIP=1 fails the run);
 * - otherwise with SRPO_REQUIRE_NATIVE_KERNELS=1 (CI): `describe`, with a first test that fails
 *   saying why the kernels are missing (the others then fail on their own).
 *
 * jest collects tests synchronously, before any `beforeAll`, so the addon is loaded here: tfjs-node
 * first, whose libtensorflow the addon registers into (as `nativeBackend()` would load it later).
 */
export function describeNative(kernels: readonly string[], title: string, fn: () => void): void {
  const missing = missingKernels(kernels);
  if (missing === undefined) {
    describe(title, fn);
  } else if (process.env.SRPO_REQUIRE_NATIVE_KERNELS === '1') {
    describe(title, () => {
      it('has the native kernels it tests (SRPO_REQUIRE_NATIVE_KERNELS=1)', () => {
        throw new Error(`SRPO_REQUIRE_NATIVE_KERNELS=1 and ${missing}`);
      });
      fn();
    });
  } else {
    describe.skip(title, fn);
  }
}

/** Why `kernels` cannot run here, or undefined when the addon is loaded with all of them. */
function missingKernels(kernels: readonly string[]): string | undefined {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only where native kernels are tested: it registers the tensorflow backend
  require('@tensorflow/tfjs-node');
  const status = loadSrpoKernels();
  if (!status.loaded) return `the srpo-kernels addon is not loaded: ${status.reason ?? 'no reason given'}`;
  const absent = kernels.filter((k) => !status.ops.includes(k));
  return absent.length > 0 ? `the addon (kernel set ${status.version}) lacks ${absent.join(', ')}` : undefined;
}
