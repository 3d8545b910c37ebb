import { CompressionTypes, Kafka, Message, Partitioners, Producer, RecordMetadata } from 'kafkajs';
import { sealOutput, type ContentKey } from './content-seal';
import { EventCodec } from './event-codec';
import { AgentOutput, EpisodeOutcome, EventMap, EventType, Transition } from './event-types';
import { DEFAULT_EVENT_LIMITS, EventLimits, floorLogProbCount, validateAgentOutput, validateEpisodeOutcome, validateTransition } from './event-validation';
import { topicCatalog, TopicCatalog } from './topic-catalog';

/** Fields with schema defaults may be left out by callers. */
export type AgentOutputInit = Omit<
  AgentOutput,
  'contextTokenIds' | 'sampling' | 'tokenIdOrigin' | 'turn' | 'parentOutputId' | 'tokenDrift' | 'malformedToolCall' | 'subjectId' | 'sealed'
> & {
  contextTokenIds?: number[];
  tokenIdOrigin?: AgentOutput['tokenIdOrigin'];
  turn?: number;
  parentOutputId?: string | null;
  tokenDrift?: boolean | null;
  malformedToolCall?: boolean;
  subjectId?: string | null;
  sealed?: AgentOutput['sealed'];
  sampling: Omit<AgentOutput['sampling'], 'seed' | 'stopTokenIds'> & Partial<Pick<AgentOutput['sampling'], 'seed' | 'stopTokenIds'>>;
};
export type TransitionInit = Omit<Transition, 'routing' | 'groupKey' | 'expectedGroupSize' | 'reward' | 'rewardSource' | 'subjectId'> &
  Partial<Pick<Transition, 'routing' | 'groupKey' | 'expectedGroupSize' | 'reward' | 'rewardSource' | 'subjectId'>>;
export type EpisodeOutcomeInit = Omit<EpisodeOutcome, 'verifierDetails' | 'observationDigests' | 'rewardSource' | 'revision' | 'subjectId'> &
  Partial<Pick<EpisodeOutcome, 'verifierDetails' | 'observationDigests' | 'rewardSource' | 'revision' | 'subjectId'>>;

export function completeAgentOutput(o: AgentOutputInit): AgentOutput {
  return {
    ...o,
    contextTokenIds: o.contextTokenIds ?? [],
    tokenIdOrigin: o.tokenIdOrigin ?? 'sampled',
    turn: o.turn ?? 0,
    parentOutputId: o.parentOutputId ?? null,
    tokenDrift: o.tokenDrift ?? null,
    malformedToolCall: o.malformedToolCall ?? false,
    subjectId: o.subjectId ?? null,
    sealed: o.sealed ?? null,
    sampling: { seed: null, stopTokenIds: [], ...o.sampling },
  };
}

export function completeTransition(t: TransitionInit): Transition {
  return { routing: null, groupKey: null, expectedGroupSize: null, reward: null, rewardSource: null, subjectId: null, ...t };
}

export function completeEpisodeOutcome(o: EpisodeOutcomeInit): EpisodeOutcome {
  return { verifierDetails: {}, observationDigests: [], rewardSource: '', revision: 0, subjectId: null, ...o };
}

/** Per (topic, partition) written: the base offset of the batch, as the broker reported it. */
export type EmitResult = RecordMetadata[];

export interface AgentEventsProducerOptions {
  kafka: Kafka;
  codec?: EventCodec;
  topics?: TopicCatalog;
  limits?: EventLimits;
  /** Transactional id: when set, `emitBatch` writes atomically. */
  transactionalId?: string;
  /**
   * Called once per sent AgentOutput that has trained tokens with a floor behaviour
   * log-prob (<= BEHAVIOUR_LOGPROB_FLOOR, e.g. the −9999 the OpenAI API reports), after the
   * batch was written. The output is sent unchanged: floor values are accepted as data.
   */
  onFloorLogProbs?: (info: { outputId: string; policyId: string; tokens: number }) => void;
  /**
   * Seals every AgentOutput's tokens under its (subject, episode) content key before it is sent
   * (crypto-shredding, docs/erasure.md): the store's KeyStore. Unset: content goes in the clear.
   */
  sealer?: ContentSealer;
}

/** Where a writer gets the content key of a (subject, episode) (the store's KeyStore). */
export interface ContentSealer {
  keyFor(subjectId: string | null, episodeId: string, nowMs: number): Promise<ContentKey>;
}

/** {@link AgentEventsProducer.floorLogProbs}: floor behaviour log-probs sent so far. */
export interface FloorLogProbStats {
  /** AgentOutputs with at least one trained token at or below BEHAVIOUR_LOGPROB_FLOOR. */
  outputs: number;
  /** Such tokens. */
  tokens: number;
}

export type AgentEvent =
  { type: 'AgentOutput'; value: AgentOutputInit } | { type: 'Transition'; value: TransitionInit } | { type: 'EpisodeOutcome'; value: EpisodeOutcomeInit };

/**
 * The producer SDK for agents: validates every event (schema and domain rules)
 * before anything is sent, encodes it with Avro single-object encoding and
 * writes it keyed by episode id with an idempotent producer (acks=all), so
 * producer retries never duplicate a record. A refused event throws a
 * `ValidationError` naming the field, and nothing from that call reaches Kafka.
 *
 * Floor behaviour log-probs (e.g. −9999 from an inference server) are valid data: they
 * are sent unchanged and counted in {@link floorLogProbs} (and `onFloorLogProbs`).
 */
export class AgentEventsProducer {
  private readonly producer: Producer;
  private readonly codec: EventCodec;
  private readonly topics: TopicCatalog;
  private readonly limits: EventLimits;
  private connected = false;
  private readonly floor: FloorLogProbStats = { outputs: 0, tokens: 0 };

  constructor(private readonly options: AgentEventsProducerOptions) {
    this.codec = options.codec ?? new EventCodec();
    this.topics = options.topics ?? topicCatalog();
    this.limits = options.limits ?? DEFAULT_EVENT_LIMITS;
    this.producer = options.kafka.producer({
      idempotent: true,
      maxInFlightRequests: options.transactionalId ? 1 : 5,
      transactionalId: options.transactionalId,
      createPartitioner: Partitioners.DefaultPartitioner,
    });
  }

  async connect(): Promise<void> {
    if (this.connected) return;
    await this.codec.useRegistry();
    await this.producer.connect();
    this.connected = true;
  }

  async disconnect(): Promise<void> {
    if (!this.connected) return;
    await this.producer.disconnect();
    this.connected = false;
  }

  /** Floor behaviour log-probs in the AgentOutputs written so far (a copy). */
  get floorLogProbs(): FloorLogProbStats {
    return { ...this.floor };
  }

  async emitOutput(output: AgentOutputInit): Promise<EmitResult> {
    return this.emitBatch([{ type: 'AgentOutput', value: output }]);
  }

  async emitTransition(transition: TransitionInit): Promise<EmitResult> {
    return this.emitBatch([{ type: 'Transition', value: transition }]);
  }

  async emitOutcome(outcome: EpisodeOutcomeInit): Promise<EmitResult> {
    return this.emitBatch([{ type: 'EpisodeOutcome', value: outcome }]);
  }

  /**
   * Validates all events first, then sends them in one request. If any event
   * is invalid, none is sent.
   */
  async emitBatch(events: AgentEvent[]): Promise<EmitResult> {
    // Refuse bad events before touching the network: a caller learns of its bug even with the
    // broker down, and nothing of the batch can have left. Confluent framing needs the registry ids first.
    let prepared = this.codec.usesRegistry ? [] : events.map((e) => this.prepare(e));
    if (this.options.sealer) {
      // Validated in the clear above (the ids are checked there); what is sent is sealed.
      events = await this.sealed(events, this.options.sealer);
      if (!this.codec.usesRegistry) prepared = events.map((e) => this.prepare(e));
    }
    await this.connect();
    if (this.codec.usesRegistry) prepared = events.map((e) => this.prepare(e));
    const byTopic = new Map<string, Message[]>();
    for (const p of prepared) {
      const list = byTopic.get(p.topic) ?? [];
      list.push(p.message);
      byTopic.set(p.topic, list);
    }
    const topicMessages = [...byTopic.entries()].map(([topic, messages]) => ({ topic, messages }));
    let metadata: RecordMetadata[];
    if (this.options.transactionalId) {
      const tx = await this.producer.transaction();
      try {
        metadata = await tx.sendBatch({ topicMessages, acks: -1, compression: CompressionTypes.None });
        await tx.commit();
      } catch (e) {
        await tx.abort().catch(() => undefined);
        throw e;
      }
    } else {
      metadata = await this.producer.sendBatch({ topicMessages, acks: -1, compression: CompressionTypes.None });
    }
    for (const p of prepared) {
      if (!p.floor) continue;
      this.floor.outputs++;
      this.floor.tokens += p.floor.tokens;
      this.options.onFloorLogProbs?.(p.floor);
    }
    return metadata;
  }

  /** `events` with each AgentOutput not yet sealed sealed under its content key (one key lookup per output; the keyring caches). */
  private async sealed(events: AgentEvent[], sealer: ContentSealer): Promise<AgentEvent[]> {
    const out: AgentEvent[] = [];
    for (const e of events) {
      if (e.type !== 'AgentOutput' || e.value.sealed) {
        out.push(e);
        continue;
      }
      const value = completeAgentOutput(e.value);
      out.push({ type: 'AgentOutput', value: sealOutput(value, await sealer.keyFor(value.subjectId, value.episodeId, value.eventTimeMs)) });
    }
    return out;
  }

  /**
   * Checks events exactly as {@link emitBatch} does (domain rules, and the schema where no
   * registry is needed first), without sending: throws the field-naming error of the first bad one.
   */
  validate(events: AgentEvent[]): void {
    for (const e of events) {
      if (!this.codec.usesRegistry) this.prepare(e);
      else if (e.type === 'AgentOutput') validateAgentOutput(completeAgentOutput(e.value), this.limits);
      else if (e.type === 'Transition') validateTransition(completeTransition(e.value), this.limits);
      else validateEpisodeOutcome(completeEpisodeOutcome(e.value), this.limits);
    }
  }

  private prepare(event: AgentEvent): { topic: string; message: Message; floor?: { outputId: string; policyId: string; tokens: number } } {
    switch (event.type) {
      case 'AgentOutput': {
        const value = completeAgentOutput(event.value);
        validateAgentOutput(value, this.limits);
        const tokens = floorLogProbCount(value);
        const prepared = this.message('AgentOutput', value, this.topics.agentOutputs.name, value.episodeId);
        return tokens > 0 ? { ...prepared, floor: { outputId: value.outputId, policyId: value.policyId, tokens } } : prepared;
      }
      case 'Transition': {
        const value = completeTransition(event.value);
        validateTransition(value, this.limits);
        return this.message('Transition', value, this.topics.transitions.name, value.episodeId);
      }
      case 'EpisodeOutcome': {
        const value = completeEpisodeOutcome(event.value);
        validateEpisodeOutcome(value, this.limits);
        return this.message('EpisodeOutcome', value, this.topics.episodeOutcomes.name, value.episodeId);
      }
    }
  }

  private message<T extends EventType>(type: T, value: EventMap[T], topic: string, key: string) {
    const bytes = this.codec.encode(type, value, { strict: true });
    return { topic, message: { key, value: bytes } };
  }
}
