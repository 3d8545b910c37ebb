import * as fs from 'fs';
import { Command } from 'commander';
import { ErrorCode, initTfBackend, SrpoError } from '@srpo/core';
import { evaluateObjectiveRequest, parseObjectiveRequest } from '@srpo/srpo';
import { CliConfig } from '../cli-config';

/** `srpo objective --in FILE [--grad]`: evaluates the objective on a JSON batch and prints JSON. */
export function objectiveCommand(config: () => CliConfig): Command {
  return new Command('objective')
    .description('evaluate the SRPO (or a baseline) objective on a batch of active sets; prints JSON')
    .requiredOption('--in <file>', 'input JSON ({"config": {...}, "sets": [...]}); "-" reads standard input')
    .option('--grad', 'also print dloss/dlogpNew for every token, nested [set][member][token]', false)
    .action(async (opts: { in: string; grad: boolean }) => {
      let text: string;
      try {
        text = fs.readFileSync(opts.in === '-' ? 0 : opts.in, 'utf8');
      } catch (e) {
        throw new SrpoError(ErrorCode.NOT_FOUND, `--in ${opts.in}: ${(e as Error).message}`);
      }
      let input: unknown;
      try {
        input = JSON.parse(text);
      } catch (e) {
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--in ${opts.in}: not valid JSON (${(e as Error).message})`);
      }
      // Validate before loading native TensorFlow, so bad input gets one clean line on stderr.
      parseObjectiveRequest(input);
      await initTfBackend(config().backend, config().backendSettings);
      const report = await evaluateObjectiveRequest(input, { grad: opts.grad });
      process.stdout.write(JSON.stringify(report, null, 2) + '\n');
    });
}
