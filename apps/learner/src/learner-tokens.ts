/** Injection tokens of the learner's pluggable parts. */
export const LEARNER_CONFIG = Symbol('LEARNER_CONFIG');
export const AUDIT_STORE = Symbol('AUDIT_STORE');
export const POLICY_TRAINER = Symbol('POLICY_TRAINER');
export const EVENTS_PUBLISHER = Symbol('LEARNER_EVENTS_PUBLISHER');
export const KAFKA_HEALTH = Symbol('KAFKA_HEALTH');
export const GROUP_SOURCE = Symbol('GROUP_SOURCE');
export const CONSUMPTION_CONTROL = Symbol('CONSUMPTION_CONTROL');
export const CLOCK = Symbol('CLOCK');
export const FAULT_INJECTOR = Symbol('FAULT_INJECTOR');
export const BACKEND_INFO = Symbol('BACKEND_INFO');
export const AUDIT_SERVICE = Symbol('AUDIT_SERVICE');

/** Epoch milliseconds; injected so tests and replays control recorded times. */
export type Clock = () => number;
