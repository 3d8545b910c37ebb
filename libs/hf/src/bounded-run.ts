import * as vm from 'vm';

/** How long one run of a model directory's code (a chat template, a tokenizer call) may take by default. */
export const DEFAULT_RUN_BOUND_MS = 1_000;

/** The one script {@link runBounded} runs: it calls the function put in its context. */
const SCRIPT = new vm.Script('run()', { filename: 'srpo-bounded-run' });
const CONTEXT = vm.createContext(Object.create(null) as object);
let depth = 0;

/**
 * Runs `call` synchronously in the calling thread and stops it once it has run `timeoutMs`,
 * throwing `exceeded()` instead. For code a model directory brings, which is untrusted input: a
 * chat template (Jinja has loops), a tokenizer's regexes (one that backtracks can run for hours
 * on a short string) and its BPE. Such calls are synchronous; unbounded, one of them would hold
 * the thread for good: a server stops answering, its Kafka consumers stop heartbeating.
 *
 * How: `node:vm`'s `timeout`. A watchdog thread terminates the JavaScript the isolate is running
 * (a regex's backtracking included, as V8 checks for interrupts there) when the bound passes,
 * and Node cancels the termination where the script returns, so the thread goes on as before.
 * The call itself runs as it would outside (its closure, its realm; its own errors come out
 * unchanged). Cost: one watchdog thread per run, about 0.07 ms (AMD EPYC Zen 4).
 *
 * A run inside a run is not bounded again: the outer bound covers it.
 */
export function runBounded<T>(call: () => T, timeoutMs: number, exceeded: () => Error): T {
  if (depth > 0) return call();
  let value: T | undefined;
  (CONTEXT as { run?: () => void }).run = () => {
    value = call();
  };
  depth++;
  try {
    SCRIPT.runInContext(CONTEXT, { timeout: timeoutMs });
  } catch (e) {
    if ((e as { code?: unknown } | null)?.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') throw exceeded();
    throw e;
  } finally {
    depth--;
    (CONTEXT as { run?: () => void }).run = undefined;
  }
  return value as T;
}
