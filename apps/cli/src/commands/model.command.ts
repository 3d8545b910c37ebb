import * as fs from 'fs';
import { fileURLToPath } from 'url';
import { Command } from 'commander';
import { ErrorCode, initTfBackend, SrpoError, ValidationError } from '@srpo/core';
import { CheckpointStore, loadCheckpoint, type Policy } from '@srpo/policy';
import {
  checkScoreCases,
  exportHfPolicy,
  HfTokenizer,
  isLlamaModel,
  loadHfModel,
  openHfWeights,
  readHfConfig,
  scoreCases,
  tokenizeCases,
  type SafetensorsDtype,
} from '@srpo/hf';
import { AuditStore } from '@srpo/store';
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

/** `policy:ID@vN` → its id and version, or undefined for a directory path. */
export function parsePolicyRef(spec: string): { policyId: string; version: number } | undefined {
  if (!spec.startsWith('policy:')) return undefined;
  const m = /^policy:([A-Za-z0-9._-]+)@v(\d+)$/.exec(spec);
  if (!m) throw new ValidationError('--model', `a policy checkpoint is named policy:ID@vN (e.g. policy:solver@v12), got ${JSON.stringify(spec)}`);
  return { policyId: m[1], version: Number(m[2]) };
}

/**
 * Loads a recorded policy version from its checkpoint (the URI in the audit store, or
 * SRPO_CHECKPOINT_DIR/<policy>/v<N>) and checks that it holds the weights the store
 * recorded for that version.
 */
async function loadRecordedPolicy(cfg: CliConfig, policyId: string, version: number): Promise<Policy> {
  const store = await AuditStore.open(cfg.store);
  let record;
  try {
    record = await store.getVersion(policyId, version);
  } finally {
    await store.close();
  }
  if (!record) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${policyId} has no recorded version ${version} in the audit store`, { field: 'version' });
  const dir = cfg.checkpointDir
    ? new CheckpointStore(cfg.checkpointDir).dirFor(policyId, version)
    : record.checkpointUri.startsWith('file:')
      ? fileURLToPath(record.checkpointUri)
      : record.checkpointUri;
  const loaded = await loadCheckpoint(dir);
  if (loaded.manifest.policyId !== policyId || loaded.manifest.version !== version || loaded.manifest.weightsHash !== record.weightsHash) {
    loaded.policy.dispose();
    throw new SrpoError(
      ErrorCode.INTEGRITY_FAILED,
      `${dir} holds ${loaded.manifest.policyId} v${loaded.manifest.version} with weights ${loaded.manifest.weightsHash}; the store records ${policyId} v${version} with ${record.weightsHash}`,
    );
  }
  return loaded.policy;
}

/** `srpo model score|export`: Hugging Face checkpoints and the policies trained from them. */
export function modelCommand(config: () => CliConfig): Command {
  const model = new Command('model').description('Hugging Face causal-LM checkpoints: score, export');
  model
    .command('score')
    .description('print log p(response[i] | prompt ++ response[<i]) for every case, as JSON')
    .requiredOption('--model <dir|policy:ID@vN>', 'a Hugging Face model directory, or a recorded policy version of the audit store')
    .requiredOption('--in <file>', 'JSON array of {"prompt", "response"} or {"promptTokenIds", "responseTokenIds"}; "-" reads standard input')
    .option('--chat', 'prompt is a list of {role, content} messages, rendered with the chat template and the generation prompt', false)
    .action(async (opts: { model: string; in: string; chat: boolean }) => {
      const ref = parsePolicyRef(opts.model);
      const input = readJsonInput(opts.in);
      if (ref) {
        await initTfBackend(config().backend, config().backendSettings);
        const policy = await loadRecordedPolicy(config(), ref.policyId, ref.version);
        try {
          const m = policy.model;
          const tokenizer = isLlamaModel(m) && m.source ? HfTokenizer.fromDirectory(m.source.dir) : undefined;
          const cases = tokenizeCases(input, tokenizer, { chat: opts.chat });
          checkScoreCases(cases, m.config);
          process.stdout.write(JSON.stringify(await scoreCases(m, cases)) + '\n');
        } finally {
          policy.dispose();
        }
        return;
      }
      // Config, weight headers, tokenizer and cases are checked before native TensorFlow
      // loads, so bad input gets one clean line on stderr.
      const hfConfig = readHfConfig(opts.model);
      openHfWeights(opts.model);
      const tokenizer = HfTokenizer.fromDirectory(opts.model);
      const cases = tokenizeCases(input, tokenizer, { chat: opts.chat });
      checkScoreCases(cases, hfConfig);
      await initTfBackend(config().backend, config().backendSettings);
      const hf = loadHfModel(opts.model);
      try {
        process.stdout.write(JSON.stringify(await scoreCases(hf.model, cases)) + '\n');
      } finally {
        hf.model.dispose();
      }
    });
  model
    .command('export')
    .description('write a recorded policy version as a directory transformers, vLLM or SGLang load (hf), or as a PEFT adapter (peft)')
    .requiredOption('--policy <id>', 'policy id')
    .requiredOption('--version <n>', 'recorded version')
    .requiredOption('--out <dir>', 'a new (or empty) directory')
    .option('--format <hf|peft>', 'hf: full weights (a LoRA policy merged into its base); peft: the adapter alone', 'hf')
    .option('--dtype <F32|BF16|F16>', "stored dtype of the weights (hf); default the base checkpoint's")
    .action(async (opts: { policy: string; version: string; out: string; format: string; dtype?: string }) => {
      if (opts.format !== 'hf' && opts.format !== 'peft') throw new ValidationError('--format', `expected hf or peft, got ${JSON.stringify(opts.format)}`);
      if (opts.dtype !== undefined && !['F32', 'BF16', 'F16'].includes(opts.dtype))
        throw new ValidationError('--dtype', `expected F32, BF16 or F16, got ${JSON.stringify(opts.dtype)}`);
      const version = Number(opts.version);
      if (!Number.isSafeInteger(version) || version < 0)
        throw new ValidationError('--version', `must be a non-negative integer, got ${JSON.stringify(opts.version)}`);
      await initTfBackend(config().backend, config().backendSettings);
      const policy = await loadRecordedPolicy(config(), opts.policy, version);
      try {
        const files = await exportHfPolicy(policy.model, { format: opts.format, outDir: opts.out, dtype: opts.dtype as SafetensorsDtype | undefined });
        process.stdout.write(JSON.stringify({ policyId: opts.policy, version, format: opts.format, out: opts.out, files }) + '\n');
      } finally {
        policy.dispose();
      }
    });
  return model;
}
