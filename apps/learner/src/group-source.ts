import { Logger } from '@srpo/core';
import type { ReadyGroup } from '@srpo/trainer';

export type { ReadyGroup } from '@srpo/trainer';

/** What the source lends a batch handler while it runs. */
export interface BatchContext {
  /**
   * Keeps the consumer's group membership alive (heartbeats, a turn of the event loop); the
   * update awaits it between micro-batches, passes and epochs. Never throws.
   */
  keepAlive(): Promise<void>;
}

/**
 * Handles one mini-batch. Resolves once the batch is durably handled (applied,
 * skipped or recognised as a redelivery); only then may the source commit the
 * batch's offsets. A rejection means nothing may be committed.
 */
export type BatchHandler = (batch: readonly ReadyGroup[], context: BatchContext) => Promise<void>;

/**
 * Delivers ready advantage groups in mini-batches (about SRPO_SETS_PER_UPDATE
 * sets each). The Kafka implementation is the consumer runner of libs/streams
 * over the advantage-groups topic; it commits offsets after `onBatch` resolves.
 */
export interface GroupSource {
  /** Starts consuming; resolves once running (not when consumption ends). Batches are handed over one at a time. */
  start(onBatch: BatchHandler): Promise<void>;
  /** Stops fetching, waits for the batch in flight, commits what was handled, disconnects. */
  stop(): Promise<void>;
}

export interface ConsumptionState {
  paused: boolean;
  /** Epoch ms of the last pause or resume; null if neither happened. */
  changedAtMs: number | null;
}

/**
 * Operator control over consumption (`POST /consumption/pause|resume`).
 * Pausing stops fetching new batches; a batch in flight finishes. Both calls
 * are idempotent.
 */
export interface ConsumptionControl {
  pause(): Promise<ConsumptionState>;
  resume(): Promise<ConsumptionState>;
  state(): ConsumptionState;
}

/**
 * Placeholder until the Kafka consumer is wired (libs/streams): it delivers
 * nothing, and its pause/resume only record the requested state. The learner
 * still restores its policy and serves the API.
 */
export class UnwiredGroupSource implements GroupSource, ConsumptionControl {
  private readonly log = new Logger('group-source');
  private current: ConsumptionState = { paused: false, changedAtMs: null };

  constructor(private readonly clock: () => number = Date.now) {}

  async start(_onBatch: BatchHandler): Promise<void> {
    this.log.warn('no group source wired: the learner will not consume advantage groups');
  }

  async stop(): Promise<void> {}

  async pause(): Promise<ConsumptionState> {
    if (!this.current.paused) this.current = { paused: true, changedAtMs: this.clock() };
    return this.state();
  }

  async resume(): Promise<ConsumptionState> {
    if (this.current.paused) this.current = { paused: false, changedAtMs: this.clock() };
    return this.state();
  }

  state(): ConsumptionState {
    return { ...this.current };
  }
}
