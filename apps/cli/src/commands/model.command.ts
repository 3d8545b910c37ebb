import * as fs from 'fs';
import { Command } from 'commander';
import { ErrorCode, initTfBackend, SrpoError } from '@srpo/core';
import { checkScoreCases, HfTokenizer, loadHfModel, openHfWeights, readHfConfig, scoreCases, tokenizeCases } from '@srpo/policy';
import { CliConfig } from '../cli-config';

function readJsonInput(file: string): unknown {
  let text: string;
  try {
    text = fs.readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (e) {
    throw new SrpoError(ErrorCode.NOT_FOUND, `--in ${file}: ${(e as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--in ${file}: not valid JSON (${(e as Error).message})`);
  }
}

/** `srpo model score --model DIR --in FILE [--chat]`: per-token log-probs of responses under a Hugging Face model. */
export function modelCommand(config: () => CliConfig): Command {
  const model = new Command('model').description('Hugging Face causal-LM checkpoints: score');
  model
    .command('score')
    .description('print log p(response[i] | prompt ++ response[<i]) for every case, as JSON')
    .requiredOption('--model <dir>', 'a Hugging Face model directory (config.json, safetensors weights, tokenizer.json)')
    .requiredOption('--in <file>', 'JSON array of {"prompt", "response"} or {"promptTokenIds", "responseTokenIds"}; "-" reads standard input')
    .option('--chat', 'prompt is a list of {role, content} messages, rendered with the chat template and the generation prompt', false)
    .action(async (opts: { model: string; in: string; chat: boolean }) => {
      // Config, weight headers, tokenizer and cases are checked before native TensorFlow
      // loads, so bad input gets one clean line on stderr.
      const hfConfig = readHfConfig(opts.model);
      openHfWeights(opts.model);
      const input = readJsonInput(opts.in);
      const tokenizer = HfTokenizer.fromDirectory(opts.model);
      const cases = tokenizeCases(input, tokenizer, { chat: opts.chat });
      checkScoreCases(cases, hfConfig);
      await initTfBackend(config().backend);
      const hf = loadHfModel(opts.model);
      try {
        process.stdout.write(JSON.stringify(await scoreCases(hf.model, cases)) + '\n');
      } finally {
        hf.model.dispose();
      }
    });
  return model;
}
