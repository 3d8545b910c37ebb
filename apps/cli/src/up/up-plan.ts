import * as path from 'path';
import type { Role } from './log-view';

/** What `srpo up` was asked for (flags already syntax-checked by commander). */
export interface UpOptions {
  /** Absolute Hugging Face model directory. */
  model: string;
  /** SRPO_LORA's JSON (`{}`: the defaults); undefined: full weights. */
  lora?: string;
  policy?: string;
  /** The gateway's port: what agents talk to. */
  port: number;
  host: string;
  servePort: number;
  learnerPort: number;
  materializerPort: number;
  /** Absolute; unset: SRPO_CHECKPOINT_DIR or the apps' default, the same for learner and serve. */
  checkpoints?: string;
  /** Absolute SQLite file of the learner's audit store; unset: the learner's SRPO_DATABASE_URL / SRPO_SQLITE_PATH. */
  sqlite?: string;
  lr?: string;
  setsPerUpdate?: string;
  backend?: string;
  readyTimeoutMs: number;
}

/** One child of the topology: the app it runs, the variables `srpo up` sets for it, where its health answers. */
export interface ChildPlan {
  role: Role;
  /** Under `dist/apps/`. */
  entry: string;
  env: Record<string, string>;
  health: string;
  /** What to print once ready. */
  url: string;
}

/** Start order; they are stopped in the reverse order (the gateway first, so no new work comes in). */
export const START_ORDER: readonly Role[] = ['materializer', 'learner', 'serve', 'gateway'];
export const STOP_ORDER: readonly Role[] = [...START_ORDER].reverse();

/**
 * `srpo up`'s exit code when a child dies on its own: which one, so a script can tell. The
 * message printed beside it says how (its exit code or signal).
 */
export const DIED_EXIT_CODE: Readonly<Record<Role, number>> = { materializer: 11, learner: 12, serve: 13, gateway: 14 };
/** Not every child answered its health check within --ready-timeout. */
export const NOT_READY_EXIT_CODE = 10;

/**
 * The policy id when --policy is not given: the model directory's name (characters outside
 * `[A-Za-z0-9._-]` become `-`), with `-lora` for a LoRA run, so a full-weight and a LoRA run of
 * one model never restore each other's checkpoints.
 */
export function defaultPolicyId(modelDir: string, lora: boolean): string {
  const base =
    path
      .basename(path.resolve(modelDir))
      .replace(/[^A-Za-z0-9._-]/g, '-')
      .replace(/^\.+/, '') || 'model';
  return lora ? `${base}-lora` : base;
}

/**
 * The four children and their variables. Everything not set here comes from the environment
 * `srpo up` runs in (each app's config module reads and validates it), so any setting of
 * docs/configuration.md still applies, to every child that reads it.
 */
export function planUp(o: UpOptions, brokers: readonly string[]): ChildPlan[] {
  const policy = o.policy ?? defaultPolicyId(o.model, o.lora !== undefined);
  const common: Record<string, string> = { KAFKA_BROKERS: brokers.join(','), KAFKAJS_NO_PARTITIONER_WARNING: '1' };
  const backend: Record<string, string> = o.backend === undefined ? {} : { SRPO_BACKEND: o.backend };
  const checkpoints: Record<string, string> = o.checkpoints === undefined ? {} : { SRPO_CHECKPOINT_DIR: o.checkpoints };
  const local = (port: number, suffix: string) => `http://127.0.0.1:${port}${suffix}`;
  const gatewayHost = o.host === '0.0.0.0' || o.host === '::' ? '127.0.0.1' : o.host;
  return [
    {
      role: 'materializer',
      entry: 'materializer/src/main.js',
      env: { ...common, SRPO_METRICS_PORT: String(o.materializerPort) },
      health: local(o.materializerPort, '/health'),
      url: local(o.materializerPort, '/metrics'),
    },
    {
      role: 'learner',
      entry: 'learner/src/main.js',
      env: {
        ...common,
        ...backend,
        SRPO_POLICY_ID: policy,
        SRPO_MODEL_DIR: o.model,
        ...(o.lora === undefined ? {} : { SRPO_LORA: o.lora }),
        ...(o.lr === undefined ? {} : { SRPO_LR: o.lr }),
        ...(o.setsPerUpdate === undefined ? {} : { SRPO_SETS_PER_UPDATE: o.setsPerUpdate }),
        ...checkpoints,
        ...(o.sqlite === undefined ? {} : { SRPO_SQLITE_PATH: o.sqlite }),
        SRPO_HTTP_PORT: String(o.learnerPort),
      },
      health: local(o.learnerPort, '/health'),
      url: local(o.learnerPort, '/'),
    },
    {
      role: 'serve',
      entry: 'serve/src/main.js',
      env: {
        ...common,
        ...backend,
        SRPO_SERVE_POLICIES: policy,
        SRPO_SERVE_PORT: String(o.servePort),
        ...checkpoints,
        // serve waits for the learner's version 0: as long as srpo up waits for readiness.
        SRPO_SERVE_STARTUP_TIMEOUT_MS: String(o.readyTimeoutMs),
      },
      health: local(o.servePort, '/health'),
      url: local(o.servePort, '/v1'),
    },
    {
      role: 'gateway',
      entry: 'gateway/src/main.js',
      env: { ...common, SRPO_GATEWAY_UPSTREAM: local(o.servePort, '/v1'), SRPO_GATEWAY_PORT: String(o.port), SRPO_GATEWAY_HOST: o.host },
      health: `http://${gatewayHost.includes(':') ? `[${gatewayHost}]` : gatewayHost}:${o.port}/health`,
      url: `http://${gatewayHost.includes(':') ? `[${gatewayHost}]` : gatewayHost}:${o.port}/v1`,
    },
  ];
}

/** The policy id the plan trains and serves (the `model` agents name). */
export function plannedPolicy(plan: readonly ChildPlan[]): string {
  return plan.find((c) => c.role === 'learner')!.env.SRPO_POLICY_ID;
}
