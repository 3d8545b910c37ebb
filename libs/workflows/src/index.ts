// The agents' environments and workflows as a library: what the agents app plays on Kafka, and
// what the CLI's offline job and the benchmarks play or relabel in process.
export * from './rollout';
export * from './roles';
export * from './tokenizer';
export * from './envs/arithmetic.env';
export * from './envs/doc-search.env';
export * from './routing';
export * from './workflows';
export * from './agent-events';
export * from './symbol-binding';
export * from './policy-sampler';
export * from './policy-shape';
export * from './offline/demo-env.inferrer';
// A deterministic RoleSampler for tests (no test-framework dependency, so it can ship in the build).
export * from './testing/scripted-sampler';
// Arithmetic word problems for real LLMs (solver and verifier), their held-out set and evaluation.
export * from './envs/word-problems.env';
export * from './envs/word-problems.heldout';
export * from './evaluation/success-interval';
export * from './text/word-problem.workflow';
