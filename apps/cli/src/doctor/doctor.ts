import { bad, type Check } from './check-support';
import type { DoctorHost, DoctorResult } from './doctor-host';
import { checkChromium, checkKafka, checkPostgres, checkWebGpu } from './infra-checks';
import { checkSmollm2 } from './model-check';
import { checkTensorflow } from './tensorflow-check';
import { checkCompiler, checkJava, checkMaven, checkNode, checkNodeModules, checkNpm, checkPython, checkPythonReference } from './toolchain-checks';

/**
 * `srpo doctor`: checks what the project needs and, for anything missing or
 * wrong, gives the one line that fixes it.
 *
 * Every side effect goes through a {@link DoctorHost} (commands, files, the
 * Kafka probe), so the decisions and the report are unit-testable with a fake
 * host, and the CLI passes `systemDoctorHost` (system-doctor-host.ts). Each command runs with a
 * timeout, so a wedged tool cannot make the doctor hang; native TensorFlow is
 * loaded in a child process, so a crashing libtensorflow is reported, not fatal.
 */

/** In report order; the name labels a check that throws. */
const CHECKS: readonly (readonly [string, Check])[] = [
  ['node', checkNode],
  ['npm', checkNpm],
  ['java', checkJava],
  ['mvn', checkMaven],
  ['python3', checkPython],
  ['python-reference', checkPythonReference],
  ['smollm2', checkSmollm2],
  ['g++', checkCompiler('g++')],
  ['make', checkCompiler('make')],
  ['node_modules', checkNodeModules],
  ['libtensorflow', checkTensorflow],
  ['kafka', checkKafka],
  ['postgresql', checkPostgres],
  ['chromium', checkChromium],
  ['vulkan', checkWebGpu],
];

/** Runs every check in order; a check that throws becomes a failed result, so one bug cannot hide the rest. */
export async function runDoctor(host: DoctorHost): Promise<DoctorResult[]> {
  const results: DoctorResult[] = [];
  for (const [name, check] of CHECKS) {
    try {
      results.push(...(await check(host)));
    } catch (e) {
      results.push(bad(name, 'required', `the check itself failed: ${(e as Error).message}`, 'report this as a bug'));
    }
  }
  return results;
}
