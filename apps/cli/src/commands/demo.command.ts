import { Command, InvalidArgumentError } from 'commander';
import { Logger } from '@srpo/core';
import { loadDemoConfig } from '../../../agents/src/demo/demo-config';
import { DemoRunner } from '../../../agents/src/demo/demo.service';

function seconds(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 5 || n > 86_400) throw new InvalidArgumentError('must be an integer number of seconds in [5, 86400]');
  return n;
}

/**
 * `srpo demo`: the main job. Starts the local broker (unless KAFKA_BROKERS is
 * set), creates the run's topics, runs one learner per policy, the
 * materializer and the agents as child processes, trains the mixed workflow
 * for `--seconds` (SRPO_DEMO_SECONDS, default 300) and reports start-versus-end
 * success per workflow. Ctrl-C stops early and cleanly; a second Ctrl-C kills.
 */
export function demoCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('demo')
    .description('train fixed, joint and routed multi-agent workflows end to end over Kafka, with live progress')
    .option('--seconds <n>', 'training time (default SRPO_DEMO_SECONDS or 300)', seconds)
    .option('--serve', 'keep the learners (audit API) up after training until Ctrl-C')
    .action(async (opts: { seconds?: number; serve?: boolean }) => {
      const config = loadDemoConfig(env, { seconds: opts.seconds, serve: opts.serve });
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
        await runner.summarize(result);
        if (config.serve && !result.failure) {
          interrupts = 0;
          runner.resetStop();
          await runner.serveUntilStopped();
        }
        process.exitCode = result.failure ? 1 : 0;
      } finally {
        process.removeListener('SIGINT', onSignal);
        process.removeListener('SIGTERM', onSignal);
      }
    });
}
