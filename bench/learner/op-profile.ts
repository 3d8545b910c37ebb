/**
 * Per-op time of the tfjs native side (`--profile-ops`): every native op of the timed steps,
 * timed around tfjs-node's backend calls. tfjs-node executes eager ops synchronously
 * (TFE_Execute returns after the kernel ran), so the time around one call is that op's kernel
 * plus its dispatch. What falls between calls (tfjs's JavaScript, the tape, GC) is the step
 * time minus the sum, reported as `outsideOpsMs`.
 *
 * `node --cpu-prof` is no substitute here: it can abort tfjs-node processes (see
 * bench/learner/RESULTS.md, Notes).
 */
export interface OpTime {
  op: string;
  callsPerStep: number;
  msPerStep: number;
}

interface BackendCalls {
  // Function-valued properties, not methods: they are saved, wrapped and put back unbound.
  executeSingleOutput: (this: unknown, name: string, ...rest: unknown[]) => unknown;
  executeMultipleOutputs: (this: unknown, name: string, ...rest: unknown[]) => unknown;
}

export class OpProfiler {
  private readonly state = { active: false, totals: new Map<string, { calls: number; ns: bigint }>() };
  private restore: (() => void) | undefined;

  /** Wraps the backend's op calls; they are timed only between {@link start} and {@link stop}. */
  constructor(backend: object) {
    const proto = Object.getPrototypeOf(backend) as BackendCalls;
    const originals = { single: proto.executeSingleOutput, multiple: proto.executeMultipleOutputs };
    const state = this.state;
    const timed = (orig: (this: unknown, name: string, ...rest: unknown[]) => unknown) =>
      function (this: unknown, name: string, ...rest: unknown[]): unknown {
        if (!state.active) return orig.call(this, name, ...rest);
        const t0 = process.hrtime.bigint();
        try {
          return orig.call(this, name, ...rest);
        } finally {
          const t = state.totals.get(name) ?? { calls: 0, ns: 0n };
          t.calls++;
          t.ns += process.hrtime.bigint() - t0;
          state.totals.set(name, t);
        }
      };
    proto.executeSingleOutput = timed(originals.single);
    proto.executeMultipleOutputs = timed(originals.multiple);
    this.restore = () => {
      proto.executeSingleOutput = originals.single;
      proto.executeMultipleOutputs = originals.multiple;
    };
  }

  start(): void {
    this.state.active = true;
  }

  stop(): void {
    this.state.active = false;
  }

  dispose(): void {
    this.restore?.();
    this.restore = undefined;
  }

  /** The `top` ops by time, per step, and the step time spent outside native ops. */
  report(steps: number, stepMs: number, top = 20): { ops: OpTime[]; inOpsMs: number; outsideOpsMs: number; opsPerStep: number } {
    const all = [...this.state.totals.entries()].map(([op, t]) => ({ op, callsPerStep: t.calls / steps, msPerStep: Number(t.ns) / 1e6 / steps }));
    all.sort((a, b) => b.msPerStep - a.msPerStep);
    const inOpsMs = all.reduce((s, o) => s + o.msPerStep, 0);
    return { ops: all.slice(0, top), inOpsMs, outsideOpsMs: stepMs - inOpsMs, opsPerStep: all.reduce((s, o) => s + o.callsPerStep, 0) };
  }
}
