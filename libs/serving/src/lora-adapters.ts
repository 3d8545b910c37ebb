import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, Logger, SrpoError, ValidationError, errorMessage } from '@srpo/core';
import { Policy } from '@srpo/policy';
import { loadLoraAdapter, type LlamaModel } from '@srpo/hf';
import type { ServedModels } from './served-models';

/** A served name that carries a policy version: `actor@v12` (what the publisher loads). */
const VERSIONED_NAME = /^(.+)@v(\d+)$/;

/**
 * The policy id and version a served name reports: `actor@v12` is policy `actor` at version
 * 12 (so `x-srpo-policy-version: actor@12`, `system_fingerprint: srpo-actor-v12`); any other
 * name is its own policy at version 0.
 */
export function servedNameIdentity(name: string): { policyId: string; version: number } {
  const m = VERSIONED_NAME.exec(name);
  if (m && Number.isSafeInteger(Number(m[2]))) return { policyId: m[1], version: Number(m[2]) };
  return { policyId: name, version: 0 };
}

/** The served name of a policy version: `actor@v12`. */
export function versionedName(policyId: string, version: number): string {
  return `${policyId}@v${version}`;
}

export interface LoraAdaptersOptions {
  /** The base every adapter is loaded over (kept for the server's life; the adapters are views of it). */
  base: LlamaModel;
  models: ServedModels;
  /** Adapters held at once; loading one more unloads the oldest loaded (vLLM's `--max-loras` is the analogue). */
  maxAdapters: number;
  logger?: Logger;
}

/**
 * LoRA adapters loaded at run time over one shared base, as vLLM's
 * `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` do: each adapter (a peft directory,
 * what `srpo model export --format peft` and the publisher write) becomes a model of its own
 * name, a view of the base with its factors ({@link LlamaModel.adapterView}). Rows of several
 * adapters generate side by side, each on the model its request leased, so a request always
 * finishes on the adapter it started with; an unloaded adapter is disposed when its last
 * request ends. The base weights stay in memory once; an adapter costs r·(in + out) per
 * adapted linear.
 */
export class LoraAdapters {
  private readonly log: Logger;
  /** Loaded names, oldest first. */
  private readonly loaded: string[] = [];

  constructor(private readonly o: LoraAdaptersOptions) {
    this.log = o.logger ?? new Logger('lora-adapters');
    if (!Number.isSafeInteger(o.maxAdapters) || o.maxAdapters < 1) throw new ValidationError('maxAdapters', `must be a positive integer, got ${o.maxAdapters}`);
  }

  names(): string[] {
    return [...this.loaded];
  }

  /**
   * Loads the peft adapter at `loraPath` and serves it as `loraName`. Refused (typed errors,
   * fields named): an empty name or path (VALIDATION_FAILED), a name already served
   * (CONFLICT), a directory that does not exist or lacks the adapter files (NOT_FOUND), an
   * adapter that does not fit the base (VALIDATION_FAILED). Past `maxAdapters`, the oldest
   * loaded adapters are unloaded; returns their names.
   */
  load(loraName: unknown, loraPath: unknown): { evicted: string[] } {
    if (typeof loraName !== 'string' || loraName === '' || typeof loraPath !== 'string' || loraPath === '')
      throw new ValidationError('lora_name', "Both 'lora_name' and 'lora_path' must be provided.");
    if (this.o.models.has(loraName)) throw new SrpoError(ErrorCode.CONFLICT, `The lora adapter '${loraName}' has already been loaded.`, { field: 'lora_name' });
    const dir = path.resolve(loraPath);
    if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory())
      throw new SrpoError(ErrorCode.NOT_FOUND, `No adapter found for ${loraPath}: not a directory`, { field: 'lora_path' });
    const view = this.o.base.adapterView();
    try {
      loadLoraAdapter(view, dir);
    } catch (e) {
      view.dispose();
      if (e instanceof SrpoError && e.code === ErrorCode.NOT_FOUND)
        throw new SrpoError(ErrorCode.NOT_FOUND, `No adapter found for ${loraPath}: ${e.message}`, { cause: e });
      throw e;
    }
    const { policyId, version } = servedNameIdentity(loraName);
    this.o.models.addNamed(loraName, new Policy(policyId, view, version));
    this.loaded.push(loraName);
    this.log.info('LoRA adapter loaded', { name: loraName, dir });
    const evicted: string[] = [];
    while (this.loaded.length > this.o.maxAdapters) {
      const oldest = this.loaded[0];
      this.unload(oldest);
      evicted.push(oldest);
      this.log.info('LoRA adapter unloaded to stay within the limit', { name: oldest, maxAdapters: this.o.maxAdapters });
    }
    return { evicted };
  }

  /** Stops serving `loraName`; requests already generating with it finish on it. NOT_FOUND when no such adapter. */
  unload(loraName: unknown): void {
    if (typeof loraName !== 'string' || loraName === '') throw new ValidationError('lora_name', "either 'lora_name' and 'lora_int_id' needs to be provided.");
    const i = this.loaded.indexOf(loraName);
    if (i < 0) throw new SrpoError(ErrorCode.NOT_FOUND, `The lora adapter '${loraName}' cannot be found.`, { field: 'lora_name' });
    this.loaded.splice(i, 1);
    try {
      this.o.models.removeNamed(loraName);
    } catch (e) {
      this.log.error('disposing an unloaded adapter failed', { name: loraName, error: errorMessage(e) });
    }
    this.log.info('LoRA adapter unloaded', { name: loraName });
  }
}
