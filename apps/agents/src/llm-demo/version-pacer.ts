import { ValidationError } from '@srpo/core';

/**
 * Keeps the agents at most `maxAhead` updates ahead of the version that serves them, as the
 * default demo's flow control does (SRPO_AGENTS_MAX_AHEAD, docs/demo.md).
 *
 * Why: the learner takes `setsPerUpdate` sets per update, which `tasksPerUpdate` problems
 * provide. Unpaced, the agents sample far faster than a CPU learner trains (measured on
 * SmolLM2-135M with LoRA: about 9 problems a minute against one 40–60 s update per 2 problems),
 * so most groups reach the learner several versions old. Their ratios then measure the
 * learner's drift, not the engine's, the correction down-weights or truncates them, and the
 * groups older than the learner's SRPO_MAX_POLICY_LAG are skipped: sampling time wasted on a
 * machine where the learner needs the CPU. Held-out success rose from 63 % to 82 % and then fell
 * back below the start within 12 updates in such a run (lr 5e-4); paced, each problem is
 * sampled by a version at most `maxAhead` updates behind the update that trains on it.
 *
 * Problem i is trained in update ⌊i / tasksPerUpdate⌋ + 1, so it may start once the served
 * version is at least ⌊i / tasksPerUpdate⌋ − maxAhead. A learner that skips a group (stale,
 * invalid) makes fewer updates than the count predicts; a wait that times out therefore
 * re-bases the count on the version served then, instead of waiting forever.
 */
export class VersionPacer {
  private skew = 0;

  constructor(
    readonly tasksPerUpdate: number,
    readonly maxAhead: number,
  ) {
    if (!(Number.isFinite(tasksPerUpdate) && tasksPerUpdate > 0)) throw new ValidationError('tasksPerUpdate', `must be > 0, got ${tasksPerUpdate}`);
    if (!(Number.isInteger(maxAhead) && maxAhead >= 0)) throw new ValidationError('maxAhead', `must be an integer >= 0, got ${maxAhead}`);
  }

  /** The served version problem `task` (0-based, in start order) waits for; ≤ 0: none. */
  required(task: number): number {
    return Math.floor(task / this.tasksPerUpdate) - this.maxAhead - this.skew;
  }

  /** The wait for problem `task` timed out with `served` serving: later problems count from there. */
  rebase(task: number, served: number): void {
    const missing = this.required(task) - served;
    if (missing > 0) this.skew += missing;
  }
}

/**
 * Waits until `served()` reaches `pacer.required(task)`, polling every `pollMs`; gives up after
 * `timeoutMs` (rebasing the pacer) or when `stopped()` says so. Returns the served version it
 * saw last and whether it had to give up.
 */
export async function waitForVersion(
  pacer: VersionPacer,
  task: number,
  served: () => Promise<number>,
  options: { pollMs: number; timeoutMs: number; now: () => number; sleep: (ms: number) => Promise<void>; stopped: () => boolean },
): Promise<{ version: number; timedOut: boolean }> {
  const deadline = options.now() + options.timeoutMs;
  let version = await served();
  while (version < pacer.required(task) && !options.stopped()) {
    if (options.now() >= deadline) {
      pacer.rebase(task, version);
      return { version, timedOut: true };
    }
    await options.sleep(options.pollMs);
    version = await served();
  }
  return { version, timedOut: false };
}
