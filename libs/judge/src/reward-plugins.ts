import { createHash } from 'crypto';
import * as fs from 'fs';
import Module from 'module';
import * as path from 'path';
import { ConfigError } from '@srpo/core';
import { ConcurrencyLimit } from './concurrency-limit';
import { JudgeFailure } from './judge-errors';
import type { RewardInput, Scorer, Verdict } from './judge-input';

/** A verifiable reward: a module's default (or `reward`) export. */
export type RewardFunction = (input: RewardInput) => number | Promise<number>;

/**
 * Loads a reward module: a CommonJS `.js`/`.cjs` file, or a `.ts` file transpiled with the
 * `typescript` package when it is installed (a development checkout). Its default export (or
 * one named `reward`) must be a function `(input) => number | Promise<number>`.
 */
export function loadRewardModule(file: string, variable = 'SRPO_JUDGE_REWARD_MODULE'): { fn: RewardFunction; sha256: string } {
  const abs = path.resolve(file);
  let source: Buffer;
  try {
    source = fs.readFileSync(abs);
  } catch (e) {
    throw new ConfigError(variable, `cannot read ${abs} (${(e as Error).message})`);
  }
  let exported: unknown;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the module is named at run time; CommonJS as the build
    exported = abs.endsWith('.ts') ? compileTs(abs, source.toString('utf8')) : require(abs);
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw new ConfigError(variable, `${abs} does not load: ${(e as Error).message}`);
  }
  const candidates = exported as { default?: unknown; reward?: unknown } | undefined;
  const fn = typeof exported === 'function' ? exported : typeof candidates?.default === 'function' ? candidates.default : candidates?.reward;
  if (typeof fn !== 'function') throw new ConfigError(variable, `${abs} exports no function (default export, module.exports or a named "reward")`);
  return { fn: fn as RewardFunction, sha256: createHash('sha256').update(source).digest('hex') };
}

function compileTs(file: string, text: string): unknown {
  let ts: typeof import('typescript');
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- optional: present in a development checkout only
    ts = require('typescript') as typeof import('typescript');
  } catch {
    throw new ConfigError('SRPO_JUDGE_REWARD_MODULE', `${file} is TypeScript but the typescript package is not installed; compile it to .js`);
  }
  const js = ts.transpileModule(text, {
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
    fileName: file,
  });
  const mod = new Module(file, module);
  mod.filename = file;
  mod.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(path.dirname(file));
  (mod as unknown as { _compile(code: string, filename: string): void })._compile(js.outputText, file);
  return mod.exports;
}

/** A reward module as a {@link Scorer}: `verifier` `module:<file name>`, details with the file's SHA-256. */
export class ModuleReward implements Scorer {
  readonly verifier: string;
  readonly details: Readonly<Record<string, string>>;

  constructor(
    private readonly fn: RewardFunction,
    file: string,
    sha256: string,
  ) {
    this.verifier = `module:${path.basename(file)}`;
    this.details = { rewardModule: path.basename(file), moduleSha256: sha256 };
  }

  static fromFile(file: string): ModuleReward {
    const { fn, sha256 } = loadRewardModule(file);
    return new ModuleReward(fn, file, sha256);
  }

  async score(input: RewardInput): Promise<Verdict> {
    let value: unknown;
    try {
      value = await this.fn(input);
    } catch (e) {
      throw new JudgeFailure('plugin', `reward module threw: ${(e as Error).message ?? String(e)}`, { cause: e });
    }
    return finiteVerdict(value, 'reward module');
  }
}

/** Largest reward endpoint answer read. */
const MAX_REWARD_BODY_BYTES = 64 * 1024;

/**
 * A reward endpoint as a {@link Scorer}: POSTs the {@link RewardInput} as JSON and reads
 * `{"reward": x}`. Timeouts, refused connections, error statuses and other bodies fail as the
 * LLM judge's do.
 */
export class HttpReward implements Scorer {
  readonly verifier: string;
  readonly details: Readonly<Record<string, string>>;

  private readonly limit: ConcurrencyLimit;

  constructor(
    private readonly url: string,
    private readonly timeoutMs: number,
    private readonly apiKey?: string,
    concurrency = 4,
  ) {
    this.limit = new ConcurrencyLimit(concurrency);
    const host = new URL(url).host;
    this.verifier = `http:${host}`;
    this.details = { endpointHost: host, rewardPath: new URL(url).pathname };
  }

  score(input: RewardInput): Promise<Verdict> {
    return this.limit.run(() => this.once(input));
  }

  private async once(input: RewardInput): Promise<Verdict> {
    const signal = AbortSignal.timeout(this.timeoutMs);
    let text: string;
    try {
      const res = await fetch(this.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.apiKey !== undefined ? { authorization: `Bearer ${this.apiKey}` } : {}) },
        body: JSON.stringify(input),
        signal,
      });
      if (!res.ok) throw new JudgeFailure('http', `HTTP ${res.status}`, { status: res.status });
      text = await res.text();
    } catch (e) {
      if (e instanceof JudgeFailure) throw e;
      if (signal.aborted) throw new JudgeFailure('timeout', `no answer within ${this.timeoutMs} ms`, { cause: e });
      throw new JudgeFailure('unreachable', `connection failed: ${(e as Error).message}`, { cause: e });
    }
    if (text.length > MAX_REWARD_BODY_BYTES) throw new JudgeFailure('garbage', `answer of ${text.length} characters; the limit is ${MAX_REWARD_BODY_BYTES}`);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new JudgeFailure('garbage', 'answer is not JSON');
    }
    return finiteVerdict((body as { reward?: unknown } | null)?.reward, 'reward endpoint');
  }
}

function finiteVerdict(value: unknown, what: string): Verdict {
  if (typeof value !== 'number' || !Number.isFinite(value))
    throw new JudgeFailure('garbage', `${what} gave ${JSON.stringify(value) ?? String(value)}, not a finite number`);
  return { reward: value, rawScore: value, details: {} };
}
