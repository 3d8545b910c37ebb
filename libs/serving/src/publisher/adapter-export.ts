import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, SrpoError } from '@srpo/core';
import type { PolicyVersion } from '@srpo/events';
import { loadCheckpoint } from '@srpo/policy';
import { PEFT_ADAPTER_CONFIG, isLlamaModel, saveLoraAdapter } from '@srpo/hf';
import { checkpointDirInStore } from '../checkpoint-location';

/**
 * Whether an announced version's checkpoint holds a LoRA adapter (read from its model.json, without
 * loading anything). The checkpoint must lie inside the checkpoint store `store` (`..` and symbolic
 * links resolved): an event names the path, and an event must not make the publisher read files
 * from elsewhere on its disk (VALIDATION_FAILED naming `checkpointUri`).
 */
export function isLoraCheckpoint(v: PolicyVersion, store: string): boolean {
  const file = path.join(checkpointDirInStore(store, v.checkpointUri), 'model.json');
  let json: { userDefinedMetadata?: { manifest?: { lora?: unknown } } };
  try {
    json = JSON.parse(fs.readFileSync(file, 'utf8')) as typeof json;
  } catch (e) {
    throw new SrpoError(ErrorCode.NOT_FOUND, `${file}: cannot be read (${(e as Error).message})`, { cause: e });
  }
  const lora = json.userDefinedMetadata?.manifest?.lora;
  return lora !== undefined && lora !== null;
}

/**
 * Writes an announced LoRA version as a peft directory, `<root>/<policyId>/v<N>/`
 * (`adapter_config.json` + `adapter_model.safetensors`, what vLLM and `srpo serve` load). The
 * checkpoint is loaded and verified as every reader does (its manifest must be the
 * announcement's policy, version and weights hash). The directory is written under a temporary
 * name and renamed into place, so a server never reads half an adapter; one already there is
 * reused. The checkpoint must lie inside the checkpoint store `store`. Returns the directory.
 */
export async function exportLoraVersion(v: PolicyVersion, root: string, store: string): Promise<string> {
  const out = path.resolve(root, v.policyId, `v${v.version}`);
  if (fs.existsSync(path.join(out, PEFT_ADAPTER_CONFIG))) return out;
  // Inside the checkpoint store only, as for isLoraCheckpoint.
  const dir = checkpointDirInStore(store, v.checkpointUri);
  const loaded = await loadCheckpoint(dir);
  try {
    const { manifest, policy } = loaded;
    if (manifest.policyId !== v.policyId || manifest.version !== v.version || manifest.weightsHash !== v.weightsHash) {
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `checkpoint ${dir} holds ${manifest.policyId} v${manifest.version} with weights ${manifest.weightsHash}; the announcement says ${v.policyId} v${v.version} with ${v.weightsHash}`,
      );
    }
    if (!isLlamaModel(policy.model) || !policy.model.adapter)
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `checkpoint ${dir}: not a LoRA policy; only LoRA versions are published`, { field: 'lora' });
    const tmp = `${out}.tmp-${process.pid}-${Date.now()}`;
    fs.mkdirSync(path.dirname(out), { recursive: true });
    try {
      await saveLoraAdapter(policy.model, tmp, { baseModelNameOrPath: manifest.base?.dir ?? null });
      fs.renameSync(tmp, out);
    } catch (e) {
      fs.rmSync(tmp, { recursive: true, force: true });
      if (fs.existsSync(path.join(out, PEFT_ADAPTER_CONFIG))) return out; // another publisher won the race
      throw e;
    }
  } finally {
    loaded.policy.dispose();
  }
  return out;
}
