import 'reflect-metadata';
import { Command } from 'commander';
import { errorMessage, SrpoError } from '@srpo/core';
import { CliConfig, loadCliConfig } from './cli-config';
import { eventsCommand } from './commands/events.command';
import { kafkaCommand } from './commands/kafka.command';
import { objectiveCommand } from './commands/objective.command';
import { auditCommand } from './commands/audit.command';
import { eraseCommand } from './commands/erase.command';
import { replayCommand } from './commands/replay.command';
import { offlineCommand } from './commands/offline.command';
import { runsCommand } from './commands/runs.command';
import { doctorCommand } from './commands/doctor.command';
import { modelCommand } from './commands/model.command';
import { demoCommand, gatewayCommand, learnerCommand, materializerCommand, serveCommand } from './commands/apps.command';
import { upCommand } from './commands/up.command';
import { publishCommand } from './commands/publish.command';
import { judgeCommand } from './commands/judge.command';

/** `env` is the process environment unless a test passes its own. */
export function buildProgram(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  let cached: CliConfig | undefined;
  const config = (): CliConfig => (cached ??= loadCliConfig(env));
  const program = new Command('srpo').description('SRPO training from a Kafka event log: broker, events, objective, replay and audit').showHelpAfterError();
  program.addCommand(kafkaCommand(config));
  program.addCommand(eventsCommand(config));
  program.addCommand(objectiveCommand(config));
  program.addCommand(demoCommand(env));
  program.addCommand(auditCommand(config));
  program.addCommand(eraseCommand(config));
  program.addCommand(replayCommand(config));
  program.addCommand(offlineCommand(config));
  program.addCommand(runsCommand(config));
  program.addCommand(doctorCommand(env));
  program.addCommand(modelCommand(config));
  program.addCommand(upCommand(config, env));
  program.addCommand(learnerCommand(env));
  program.addCommand(materializerCommand(env));
  program.addCommand(serveCommand(env));
  program.addCommand(gatewayCommand(env));
  program.addCommand(publishCommand(config, env));
  program.addCommand(judgeCommand(config, env));
  return program;
}

export async function main(argv: string[] = process.argv, env: Readonly<Record<string, string | undefined>> = process.env): Promise<void> {
  try {
    await buildProgram(env).parseAsync(argv);
  } catch (e) {
    // One line, no stack trace: these are user-facing errors.
    const code = e instanceof SrpoError ? `[${e.code}] ` : '';
    process.stderr.write(`srpo: ${code}${errorMessage(e)}\n`);
    process.exitCode = process.exitCode && process.exitCode !== 0 ? process.exitCode : 1;
  }
}

if (require.main === module) {
  void main();
}
