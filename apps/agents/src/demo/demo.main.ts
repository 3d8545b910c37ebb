import 'reflect-metadata';
import { Command, InvalidArgumentError } from 'commander';
import { errorMessage, Logger, SrpoError } from '@srpo/core';
import { loadDemoConfig } from './demo-config';
import { DemoRunner } from './demo.service';

function rate(value: string): number {
  const n = Number(value);
  if (!(n >= 0 && n <= 1)) throw new InvalidArgumentError('must be a success rate in [0, 1] (0: never end early)');
  return n;
}

function count(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

function seconds(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 5 || n > 86_400) throw new InvalidArgumentError('must be an integer number of seconds in [5, 86400]');
  return n;
}

/**
 * The demo's entry (`dist/apps/agents/src/demo/demo.main.js`), which `srpo demo` runs as a
 * process: the demo belongs to the agents app, and the CLI only launches it.
 *
 * `srpo demo`: the main job. Starts the local broker (unless KAFKA_BROKERS is
 * set), creates the run's topics, runs one learner per policy, the
 * materializer and the agents as child processes, trains the mixed workflow
 * until every workflow holds the target success over the last minute
 * (`--target`, default 0.9), at most `--seconds` (SRPO_DEMO_SECONDS, default 1500),
 * and reports start-versus-end success per workflow. `--updates N` ends once every
 * policy has applied N updates instead (progress, not wall time: the tests use it).
 * Ctrl-C stops early and cleanly; a second Ctrl-C kills.
 */
export function demoCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('demo')
    .description('train fixed, joint and routed multi-agent workflows end to end over Kafka, with live progress')
    .option('--seconds <n>', 'the most training time (default SRPO_DEMO_SECONDS or 1500)', seconds)
    .option(
      '--target <rate>',
      'end once every workflow holds this success over the last minute, 95 % interval (default SRPO_DEMO_TARGET or 0.9; 0: never early)',
      rate,
    )
    .option('--updates <n>', 'end once every policy has applied this many updates (default SRPO_DEMO_UPDATES, off)', count)
    .option('--serve', 'keep the learners (audit API) up after training until Ctrl-C')
    .option(
      '--model <dir>',
      "a Hugging Face model directory (Llama, Qwen2, Mistral) as every policy's version 0 (default SRPO_MODEL_DIR; unset: the project transformer)",
    )
    .action(async (opts: { seconds?: number; serve?: boolean; target?: number; updates?: number; model?: string }) => {
      const config = loadDemoConfig(env, { seconds: opts.seconds, serve: opts.serve, target: opts.target, updates: opts.updates, model: opts.model });
      Logger.configure({ level: config.logLevel });
      const out = {
        write: (s: string) => void process.stdout.write(s),
        isTTY: Boolean(process.stdout.isTTY),
        get columns() {
          return process.stdout.columns;
        },
      };
      const runner = new DemoRunner(config, out);
      let interrupts = 0;
      const onSignal = () => {
        interrupts++;
        if (interrupts === 1) runner.requestStop();
        else {
          process.stderr.write('\nsecond interrupt: killing the demo processes\n');
          runner.forceKill();
          process.exit(130);
        }
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        const result = await runner.run();
        const serving = config.serve && !result.failure;
        // Arm the serving phase before the summary says "until Ctrl-C": from that line on, a
        // Ctrl-C stops serving, one that arrives while the summary is still finishing (the
        // monitor's disconnect) included. Reset after the summary, such a Ctrl-C was lost and the
        // demo served on (a test that interrupts as soon as it reads the line hung on it).
        if (serving) {
          interrupts = 0;
          runner.resetStop();
        }
        await runner.summarize(result);
        if (serving) await runner.serveUntilStopped();
        process.exitCode = result.failure ? 1 : 0;
      } finally {
        process.removeListener('SIGINT', onSignal);
        process.removeListener('SIGTERM', onSignal);
      }
    });
}

if (require.main === module) {
  demoCommand()
    .name('srpo demo')
    .parseAsync(process.argv)
    .catch((e: unknown) => {
      // One line, no stack trace, as the CLI prints its own errors.
      process.stderr.write(`srpo: ${e instanceof SrpoError ? `[${e.code}] ` : ''}${errorMessage(e)}\n`);
      process.exit(1);
    });
}
