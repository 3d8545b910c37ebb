import 'reflect-metadata';
import { Command } from 'commander';
import { errorMessage, SrpoError } from '@srpo/core';
import { LLM_DEMO_DEFAULTS, loadLlmDemoConfig, type LlmDemoFlags } from './llm-demo-config';
import { LlmDemo } from './llm-demo.service';

const d = LLM_DEMO_DEFAULTS;

/**
 * The LLM demo's entry (`dist/apps/agents/src/llm-demo/llm-demo.main.js`), which `srpo demo --llm`
 * runs as a process: the demo belongs to the agents app, and the CLI only launches it.
 *
 * `srpo demo --llm`: SmolLM2-135M-Instruct learns arithmetic word problems through the whole
 * production loop (`srpo up`: materializer, learner training a LoRA adapter, srpo serve, srpo
 * gateway, over Kafka), with held-out greedy success before training and every --eval-every
 * seconds, until the latest 95 % interval lies wholly above the start's (or --until time) or
 * --seconds of training; then the topology stops in order and the summary and result.json say
 * start against end. Ctrl-C stops early and cleanly; a second Ctrl-C kills.
 * `--attach --gateway URL --serve-url URL --policy ID`: only the agents, against a running `srpo up`.
 * Every value is validated in llm-demo-config.ts (errors name the flag), so commander only collects strings.
 */
export function llmDemoCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('demo --llm')
    .description('a real LLM (SmolLM2-135M-Instruct + LoRA) learns arithmetic word problems through srpo up, with held-out success before and during training')
    .option('--seconds <n>', `the most training time in seconds (default ${d.seconds})`)
    .option('--held-out <n>', `held-out problems per evaluation (default ${d.heldOut})`)
    .option('--eval-every <s>', `seconds of training between held-out evaluations (default ${d.evalEverySeconds})`)
    .option('--until <rule>', "gain: stop once the held-out interval lies wholly above the start's; time: train for --seconds (default gain)")
    .option('--verifier', 'add the verifier role (default: solver only)')
    .option('--variant <name>', `difficulty of the word problems (default ${d.variant})`)
    .option('--group-size <n>', `episodes per problem (default ${d.groupSize})`)
    .option('--temperature <t>', `sampling temperature of play (default ${d.temperature})`)
    .option('--concurrency <n>', `problems in flight (default ${d.concurrency})`)
    .option('--model <dir>', 'a Hugging Face model directory (default: SmolLM2-135M-Instruct where the set-up puts it)')
    .option('--policy <id>', `the policy id (default ${d.policy}; required with --attach)`)
    .option('--lr <rate>', `the learner's learning rate (default ${d.lr})`)
    .option('--correction <kind>', "the learner's engine/learner mismatch correction: none, tis or mis (default SRPO_CORRECTION or tis)")
    .option('--sets-per-update <n>', `the learner's active sets per update, which pacing counts by (default SRPO_SETS_PER_UPDATE or ${d.setsPerUpdate})`)
    .option('--max-ahead <n|off>', `problems start at most this many updates ahead of the served version; off: no pacing (default ${d.maxAhead})`)
    .option('--port <n>', `the gateway's port (default ${d.gatewayPort})`)
    .option('--serve-port <n>', `srpo serve's port (default ${d.servePort})`)
    .option('--learner-port <n>', `the learner's HTTP port (default ${d.learnerPort})`)
    .option('--materializer-port <n>', `the materializer's metrics port (default ${d.materializerPort})`)
    .option('--ready-timeout <s>', `longest wait for srpo up to be ready (default ${d.readyTimeoutSeconds})`)
    .option('--attach', 'run only the agents, against an srpo up already running (with --gateway, --serve-url, --policy)')
    .option('--gateway <url>', "with --attach: the gateway's OpenAI base URL, e.g. http://127.0.0.1:8100/v1")
    .option('--serve-url <url>', "with --attach: srpo serve's OpenAI base URL for greedy evaluation, e.g. http://127.0.0.1:8000/v1")
    .option('--learner-url <url>', "with --attach (optional): the learner's HTTP API, for the update count, e.g. http://127.0.0.1:3000")
    .action(async (flags: LlmDemoFlags) => {
      const config = loadLlmDemoConfig(flags, env);
      const out = {
        write: (s: string) => void process.stdout.write(s),
        isTTY: Boolean(process.stdout.isTTY),
        get columns() {
          return process.stdout.columns;
        },
      };
      const demo = new LlmDemo(config, out, env);
      let interrupts = 0;
      const onSignal = () => {
        interrupts++;
        if (interrupts === 1) demo.requestStop();
        else {
          process.stderr.write('\nsecond interrupt: killing the demo processes\n');
          demo.forceKill();
          process.exit(130);
        }
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        process.exitCode = await demo.run();
      } finally {
        process.removeListener('SIGINT', onSignal);
        process.removeListener('SIGTERM', onSignal);
      }
    });
}

if (require.main === module) {
  llmDemoCommand()
    .name('srpo demo --llm')
    .parseAsync(process.argv)
    .catch((e: unknown) => {
      // One line, no stack trace, as the CLI prints its own errors.
      process.stderr.write(`srpo: ${e instanceof SrpoError ? `[${e.code}] ` : ''}${errorMessage(e)}\n`);
      process.exit(1);
    });
}
