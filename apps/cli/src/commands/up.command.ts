import * as fs from 'fs';
import * as path from 'path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { errorMessage, repoRoot, ValidationError } from '@srpo/core';
import { Kafka, logLevel } from 'kafkajs';
import { ensureTopics, kafkaConfig, topicCatalog } from '@srpo/events';
import { CliConfig } from '../cli-config';
import { cleanExit, describeExit, Supervisor, type ChildExit } from '../up/supervisor';
import { DIED_EXIT_CODE, NOT_READY_EXIT_CODE, planUp, plannedPolicy, STOP_ORDER, type ChildPlan, type UpOptions } from '../up/up-plan';

const int = (min: number, max: number) => (value: string) => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new InvalidArgumentError(`must be an integer in [${min}, ${max}]`);
  return n;
};
const nonEmpty = (value: string) => {
  if (value.trim() === '') throw new InvalidArgumentError('must not be empty');
  return value.trim();
};

interface UpFlags {
  model: string;
  lora?: string | true;
  policy?: string;
  port: number;
  host: string;
  servePort: number;
  learnerPort: number;
  materializerPort: number;
  checkpoints?: string;
  sqlite?: string;
  lr?: string;
  setsPerUpdate?: number;
  backend?: string;
  readyTimeout: number;
  stopTimeout: number;
}

/**
 * `srpo up --model DIR [--lora]`: the whole topology on one machine — materializer, a learner
 * training the Hugging Face model in DIR, `srpo serve` following its versions, `srpo gateway`
 * in front — each the app's compiled main as a child process (the CLI never imports an app),
 * with one log view, a readiness wait on the health endpoints, and an orderly stop.
 */
export function upCommand(config: () => CliConfig, env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('up')
    .description(
      'start materializer, learner (training the model in --model), srpo serve and srpo gateway on the broker, with one log view; Ctrl-C stops them in order',
    )
    .requiredOption('--model <dir>', 'a Hugging Face model directory (config.json, safetensors, tokenizer.json): version 0 of the policy')
    .addOption(new Option('--lora [json]', 'train a LoRA adapter on the frozen base (JSON settings such as {"r":8,"alpha":16}; alone: the defaults)'))
    .option('--policy <id>', "the policy id, which agents name as the OpenAI model (default: the model directory's name, + -lora with --lora)", nonEmpty)
    .option('--port <n>', "the gateway's port: the base_url agents use", int(0, 65535), 8100)
    .option('--host <addr>', 'address the gateway listens on', nonEmpty, '127.0.0.1')
    .option('--serve-port <n>', "srpo serve's port (127.0.0.1)", int(1, 65535), 8000)
    .option('--learner-port <n>', "the learner's HTTP API and dashboard port", int(1, 65535), 3000)
    .option('--materializer-port <n>', "the materializer's /metrics and /health port", int(1, 65535), 3001)
    .option('--checkpoints <dir>', 'checkpoint root shared by learner and serve [SRPO_CHECKPOINT_DIR, default .srpo/checkpoints]')
    .option('--sqlite <file>', "the learner's SQLite audit store [SRPO_SQLITE_PATH, default .srpo/learner.sqlite]")
    .option('--lr <rate>', "the learner's learning rate [SRPO_LR, default by model kind: docs/learner.md]", (v: string) => {
      if (!Number.isFinite(Number(v)) || Number(v) < 0) throw new InvalidArgumentError('must be a number >= 0 such as 1e-4');
      return v;
    })
    .option('--sets-per-update <n>', 'active sets per update [SRPO_SETS_PER_UPDATE, default 16]', int(1, 100_000))
    .addOption(
      new Option('--backend <name>', 'TensorFlow.js backend of learner and serve [SRPO_BACKEND, default auto]').choices([
        'auto',
        'tensorflow-gpu',
        'tensorflow',
        'cpu',
      ]),
    )
    .option('--ready-timeout <s>', 'longest wait for every health check to answer', int(1, 86_400), 600)
    .option('--stop-timeout <s>', 'on stop, longest wait for each process before it is killed', int(1, 3_600), 60)
    .action((flags: UpFlags) => up(flags, config(), env));
}

async function up(flags: UpFlags, config: CliConfig, env: Readonly<Record<string, string | undefined>>): Promise<void> {
  const cwd = process.cwd();
  const model = path.resolve(cwd, flags.model);
  if (!fs.existsSync(path.join(model, 'config.json')))
    throw new ValidationError('--model', `${model} is not a Hugging Face model directory (no config.json); docs/hf-models.md says how to make one`);
  const options: UpOptions = {
    model,
    ...(flags.lora === undefined ? {} : { lora: flags.lora === true ? '{}' : flags.lora }),
    ...(flags.policy === undefined ? {} : { policy: flags.policy }),
    port: flags.port,
    host: flags.host,
    servePort: flags.servePort,
    learnerPort: flags.learnerPort,
    materializerPort: flags.materializerPort,
    ...(flags.checkpoints === undefined ? {} : { checkpoints: path.resolve(cwd, flags.checkpoints) }),
    ...(flags.sqlite === undefined ? {} : { sqlite: path.resolve(cwd, flags.sqlite) }),
    ...(flags.lr === undefined ? {} : { lr: flags.lr }),
    ...(flags.setsPerUpdate === undefined ? {} : { setsPerUpdate: String(flags.setsPerUpdate) }),
    ...(flags.backend === undefined ? {} : { backend: flags.backend }),
    readyTimeoutMs: flags.readyTimeout * 1000,
  };
  const plan = planUp(options, config.kafka.brokers);
  const files = new Map(plan.map((c) => [c.role, path.join(repoRoot(), 'dist', 'apps', c.entry)]));
  for (const file of files.values()) if (!fs.existsSync(file)) throw new Error(`${file} is missing: run npm run build first`);
  await prepareBroker(config);

  const out = (text: string) => process.stdout.write(text);
  const colour = process.stdout.isTTY === true;
  let trigger!: (reason: StopReason) => void;
  const stopRequested = new Promise<StopReason>((resolve) => (trigger = resolve));
  const supervisor = new Supervisor(out, colour, (exit) => trigger({ kind: 'died', exit }));
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals === 1) trigger({ kind: 'signal', signal });
    else {
      out(`srpo up: second ${signal}: killing every process now\n`);
      supervisor.killNow();
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    out(
      `srpo up: policy ${plannedPolicy(plan)} (${options.lora === undefined ? 'full weights' : 'LoRA'}) from ${model}; brokers ${config.kafka.brokers.join(',')}\n`,
    );
    for (const child of plan) supervisor.start(child, files.get(child.role)!, env);
    const readiness = await Promise.race([waitReady(plan, flags.readyTimeout * 1000, stopRequested), stopRequested]);
    if (readiness === 'ready') printReady(plan, out);
    const reason = readiness === 'ready' ? await stopRequested : readiness === 'timeout' ? ({ kind: 'not-ready' } as const) : readiness;
    process.exitCode = await stopAll(supervisor, reason, flags.stopTimeout * 1000, out);
  } finally {
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
  }
}

type StopReason = { kind: 'signal'; signal: NodeJS.Signals } | { kind: 'died'; exit: ChildExit } | { kind: 'not-ready' };

/** Fails with how to start the broker when none answers; then creates the topics, as the apps do. */
async function prepareBroker(config: CliConfig): Promise<void> {
  // kafkajs's own connection errors stay quiet: the one line below says what is wrong and what to do.
  const admin = new Kafka({ ...kafkaConfig({ ...config.kafka, retries: 1, connectionTimeoutMs: 3000 }), logLevel: logLevel.NOTHING }).admin();
  try {
    await admin.connect();
  } catch (e) {
    const how = config.externalKafka
      ? 'check KAFKA_BROKERS and the cluster'
      : 'start the local one with `infra/kafka/kafka.sh start` (or `npx srpo kafka start`), or point KAFKA_BROKERS at a cluster';
    throw new Error(`no Kafka broker answers at ${config.kafka.brokers.join(',')} (${errorMessage(e)}): ${how}`);
  }
  try {
    await ensureTopics(admin, topicCatalog(config.topics).all());
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/** Polls every child's health endpoint until each answered 200 once; 'timeout' past `timeoutMs`. */
async function waitReady(plan: readonly ChildPlan[], timeoutMs: number, stopped: Promise<unknown>): Promise<'ready' | 'timeout'> {
  let done = false;
  void stopped.then(() => (done = true));
  const deadline = Date.now() + timeoutMs;
  const pending = new Set(plan);
  while (pending.size > 0) {
    if (done) return 'timeout';
    for (const child of [...pending]) {
      try {
        const res = await fetch(child.health, { signal: AbortSignal.timeout(2000) });
        await res.body?.cancel();
        if (res.ok) pending.delete(child);
      } catch {
        // Not listening yet.
      }
    }
    if (pending.size === 0) break;
    if (Date.now() > deadline) return 'timeout';
    await new Promise((r) => setTimeout(r, 500));
  }
  return 'ready';
}

function printReady(plan: readonly ChildPlan[], out: (text: string) => void): void {
  const url = (role: string) => plan.find((c) => c.role === role)!.url;
  out(
    [
      '',
      'srpo up: ready',
      `  gateway       ${url('gateway')}   <- OpenAI base_url for agents; model "${plannedPolicy(plan)}"`,
      `  serve         ${url('serve')}`,
      `  learner       ${url('learner')}   (dashboard, /health, /metrics)`,
      `  materializer  ${url('materializer')}`,
      'Ctrl-C stops gateway, serve, learner and materializer, in that order.',
      '',
      '',
    ].join('\n'),
  );
}

/** Stops every child in order and turns how things ended into srpo up's exit code. */
async function stopAll(supervisor: Supervisor, reason: StopReason, graceMs: number, out: (text: string) => void): Promise<number> {
  if (reason.kind === 'signal') out(`srpo up: ${reason.signal}: stopping gateway, serve, learner, materializer\n`);
  else if (reason.kind === 'not-ready') out('srpo up: not every process became ready in time (see the log above); stopping\n');
  else out(`srpo up: the ${reason.exit.role} exited on its own (${describeExit(reason.exit)}); stopping the others\n`);
  const exits = await supervisor.stop(STOP_ORDER, graceMs);
  const unclean = exits.filter((e) => e.expected && !cleanExit(e));
  for (const e of unclean) out(`srpo up: the ${e.role} did not stop cleanly (${describeExit(e)}${e.killed ? ', killed' : ''})\n`);
  if (reason.kind === 'died') {
    out(`srpo up: exit ${DIED_EXIT_CODE[reason.exit.role]}: the ${reason.exit.role} died (${describeExit(reason.exit)})\n`);
    return DIED_EXIT_CODE[reason.exit.role];
  }
  if (reason.kind === 'not-ready') return NOT_READY_EXIT_CODE;
  out(unclean.length === 0 ? 'srpo up: every process stopped\n' : '');
  return unclean.length === 0 ? 0 : 1;
}
