/**
 * Stable reason codes for dead-lettered events and invalid sets. They appear in
 * `DeadLetter.reasonCode`, in metric labels (`deadletter_total{reason=...}`) and in
 * the bad-input corpus; never rename one.
 */
export enum ReasonCode {
  /** Fewer bytes than a header, or the Avro payload ends early. */
  DECODE_TRUNCATED = 'DECODE_TRUNCATED',
  /** Neither `C3 01` (single-object) nor `00` (Confluent) at the start. */
  DECODE_BAD_MAGIC = 'DECODE_BAD_MAGIC',
  /** The header names a schema fingerprint or registry id this process does not know. */
  UNKNOWN_SCHEMA = 'UNKNOWN_SCHEMA',
  /** The payload does not decode under the schema its header names (bytes left over, bad varint, ...). */
  DECODE_MALFORMED = 'DECODE_MALFORMED',
  /** A decoded event of a type the topic does not carry. */
  WRONG_EVENT_TYPE = 'WRONG_EVENT_TYPE',
  /** The message exceeds the configured size limit. */
  PAYLOAD_TOO_LARGE = 'PAYLOAD_TOO_LARGE',
  /** A field value is out of its domain (NaN log-prob, unequal lengths, empty id, ...). */
  INVALID_FIELD = 'INVALID_FIELD',
  /** The Kafka key is not the event's episode id, so co-partitioning is broken. */
  KEY_MISMATCH = 'KEY_MISMATCH',
  /** The output's policy version is newer than any version the learner published. */
  FUTURE_POLICY_VERSION = 'FUTURE_POLICY_VERSION',
  /** Event time too far from the stream's watermark (clock skew). */
  CLOCK_SKEW = 'CLOCK_SKEW',
  /** A transition lists an output that belongs to another episode. */
  FOREIGN_EPISODE_OUTPUT = 'FOREIGN_EPISODE_OUTPUT',
  /** A transition lists the same output twice. */
  DUPLICATE_OUTPUT_IN_TRANSITION = 'DUPLICATE_OUTPUT_IN_TRANSITION',
  /** expectedCardinality disagrees with the listed outputs. */
  CARDINALITY_MISMATCH = 'CARDINALITY_MISMATCH',
  /** Two transitions claim the same output. */
  OUTPUT_CLAIMED_TWICE = 'OUTPUT_CLAIMED_TWICE',
  /** An outcome arrived for an episode that has no events. */
  UNKNOWN_EPISODE = 'UNKNOWN_EPISODE',
  /** Same id, different content: a producer bug, not a retry. */
  CONFLICTING_DUPLICATE = 'CONFLICTING_DUPLICATE',
  /**
   * An outcome that came after its episode's reward window (SRPO_REWARD_WINDOWS, else
   * SRPO_SET_TTL_MS): its sets already went to invalid-sets as REWARD_MISSING_AT_TTL, or, for a
   * revised outcome, the window in which revisions are applied has ended (docs/rewards.md).
   */
  OUTCOME_AFTER_WINDOW = 'OUTCOME_AFTER_WINDOW',
  /** An outcome with a lower `revision` than the one its episode already has, with other content. */
  SUPERSEDED_OUTCOME = 'SUPERSEDED_OUTCOME',
  /**
   * The processor threw on the record in each of its attempts (a poison record: a bug, not
   * bad input it refused); the stream runtime dead-letters it so that the partition moves on.
   */
  PROCESSING_FAILED = 'PROCESSING_FAILED',
  /** A set's members did not all arrive before its deadline. */
  MEMBER_MISSING_AT_TTL = 'MEMBER_MISSING_AT_TTL',
  /** All members arrived, but neither an immediate reward nor the episode outcome did. */
  REWARD_MISSING_AT_TTL = 'REWARD_MISSING_AT_TTL',
  /** A set whose members come from different policies. */
  MIXED_POLICY_SET = 'MIXED_POLICY_SET',
}
