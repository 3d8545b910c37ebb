import { HfTextCodec, SymbolTextCodec, type TextCodec } from './text-codec';
import { ErrorCode, SrpoError } from '@srpo/core';
import { PolicyRegistry, type Policy } from '@srpo/policy';
import { isLlamaModel } from '@srpo/hf';

/** A policy as served: its weights and the codec that gives it text. */
export interface ServedModel {
  policy: Policy;
  codec: TextCodec;
}

/** A served model held for one request: released when the request ends, so that a replaced version is disposed only then. */
export interface ModelLease extends ServedModel {
  release(): void;
}

/**
 * The models a server answers with: the policies of a registry kept current by a
 * `PolicyPool`, and named models added at run time (a `--model` directory, LoRA adapters
 * loaded through `/v1/load_lora_adapter`). A request leases the current version of its model
 * for its whole life; a version replaced meanwhile ({@link retire}, the pool's `retire` hook)
 * or a named model removed ({@link removeNamed}) is disposed when its last lease ends. So a
 * new version serves every request that arrives after it, and none is cut off or mixed.
 */
export class ServedModels {
  private readonly leases = new Map<Policy, number>();
  private readonly retired = new Set<Policy>();
  private readonly codecs = new Map<string, TextCodec>();
  /** Served name → model, besides the registry's policies. */
  private readonly named = new Map<string, Policy>();

  constructor(private readonly registry: PolicyRegistry = new PolicyRegistry()) {}

  ids(): string[] {
    return [...this.registry.policies().map((p) => p.id), ...this.named.keys()];
  }

  /** The version a new request to `id` gets. */
  version(id: string): number {
    return this.get(id).version;
  }

  has(id: string): boolean {
    return this.named.has(id) || this.registry.has(id);
  }

  /** The policy a request to `id` gets now (its `id` and `version` are what the response reports). */
  get(id: string): Policy {
    return this.named.get(id) ?? this.registry.get(id);
  }

  /** Serves `policy` under `name` (not already served). */
  addNamed(name: string, policy: Policy): void {
    if (this.has(name)) throw new SrpoError(ErrorCode.CONFLICT, `a model named ${name} is already served`, { field: 'name' });
    this.named.set(name, policy);
  }

  /** Stops serving `name`; its model is disposed once no request holds it. False when no such named model. */
  removeNamed(name: string): boolean {
    const policy = this.named.get(name);
    if (!policy) return false;
    this.named.delete(name);
    this.retire(policy);
    return true;
  }

  /** Requests holding `name`'s model now. */
  leasesOf(name: string): number {
    const policy = this.named.get(name);
    return policy ? (this.leases.get(policy) ?? 0) : 0;
  }

  /** The current version of `id`, held until `release()`. */
  lease(id: string): ModelLease {
    const policy = this.get(id);
    this.leases.set(policy, (this.leases.get(policy) ?? 0) + 1);
    let released = false;
    return {
      policy,
      codec: this.codecOf(policy),
      release: () => {
        if (released) return;
        released = true;
        const left = (this.leases.get(policy) ?? 1) - 1;
        if (left > 0) this.leases.set(policy, left);
        else {
          this.leases.delete(policy);
          if (this.retired.delete(policy)) policy.dispose();
        }
      },
    };
  }

  /** A replaced version: disposed now if no request holds it, else by its last lease. */
  retire(old: Policy): void {
    if ((this.leases.get(old) ?? 0) === 0) old.dispose();
    else this.retired.add(old);
  }

  /** Versions replaced but still generating. */
  get retiredCount(): number {
    return this.retired.size;
  }

  /** Disposes every named model now (shutdown, after the engine drained). */
  disposeNamed(): void {
    for (const p of this.named.values()) p.dispose();
    this.named.clear();
    for (const p of this.retired) p.dispose();
    this.retired.clear();
  }

  private codecOf(policy: Policy): TextCodec {
    const { model } = policy;
    const source = isLlamaModel(model) ? model.source : undefined;
    const key = source ? `hf:${source.hash}` : `symbols:${model.config.vocabSize}`;
    let codec = this.codecs.get(key);
    if (!codec) {
      codec = source ? HfTextCodec.fromDirectory(source.dir) : new SymbolTextCodec(model.config.vocabSize);
      this.codecs.set(key, codec);
    }
    return codec;
  }
}
