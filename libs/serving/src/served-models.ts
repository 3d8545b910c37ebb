import { HfTextCodec, SymbolTextCodec, type TextCodec } from './text-codec';
import type { Policy, PolicyRegistry } from '@srpo/policy';
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
 * The policies a server answers with, over a registry kept current by a `PolicyPool`. A
 * request leases the current version of its model for its whole life; a version replaced
 * meanwhile ({@link retire}, the pool's `retire` hook) is disposed when its last lease ends.
 * So a new version serves every request that arrives after it, and none is cut off.
 */
export class ServedModels {
  private readonly leases = new Map<Policy, number>();
  private readonly retired = new Set<Policy>();
  private readonly codecs = new Map<string, TextCodec>();

  constructor(private readonly registry: PolicyRegistry) {}

  ids(): string[] {
    return this.registry.policies().map((p) => p.id);
  }

  /** The version a new request to `id` gets. */
  version(id: string): number {
    return this.registry.get(id).version;
  }

  has(id: string): boolean {
    return this.registry.has(id);
  }

  /** The current version of `id`, held until `release()`. */
  lease(id: string): ModelLease {
    const policy = this.registry.get(id);
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
