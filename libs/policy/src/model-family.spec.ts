import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ErrorCode, SrpoError } from '@srpo/core';
import { loadCheckpoint, saveCheckpoint } from './checkpoint-store';
import { modelFamily, registeredModelFamilies, registerModelFamily, UnknownModelFamilyError, type ModelFamily } from './model-family';
import { Policy } from './policy';
import { isTransformerModel, transformerFamily } from './transformer-family';
import { nativeBackend, TINY } from './test/fixtures';

describe('model families', () => {
  beforeAll(nativeBackend);

  it('the checkpoint store knows the project transformer without any other import', () => {
    expect(registeredModelFamilies()).toContain('causal-transformer');
    expect(modelFamily('causal-transformer')).toBe(transformerFamily);
  });

  it("an unregistered kind is refused by name, pointing at import '@srpo/hf'", () => {
    // @srpo/policy never imports @srpo/hf, so hf-llama is unknown here.
    const error = (() => {
      try {
        modelFamily('hf-llama', 'checkpoint /ckpt');
      } catch (e) {
        return e;
      }
      throw new Error('expected a throw');
    })();
    expect(error).toBeInstanceOf(UnknownModelFamilyError);
    expect(error).toMatchObject({ code: ErrorCode.ENVIRONMENT, kind: 'hf-llama', field: 'modelKind' });
    expect((error as Error).message).toMatch(/^checkpoint \/ckpt: no model family "hf-llama" is registered .*import '@srpo\/hf'/);
  });

  it('registering the same family again is a no-op; another family for a taken kind is a CONFLICT', () => {
    registerModelFamily(transformerFamily);
    expect(modelFamily('causal-transformer')).toBe(transformerFamily);
    const impostor: ModelFamily = { ...transformerFamily };
    expect(() => registerModelFamily(impostor)).toThrow(expect.objectContaining({ code: ErrorCode.CONFLICT }));
    expect(modelFamily('causal-transformer')).toBe(transformerFamily);
  });

  it('loadCheckpoint refuses a checkpoint of an unregistered family before decoding its weights', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'policy-family-'));
    const policy = Policy.create('p', TINY, 1);
    try {
      expect(isTransformerModel(policy.model)).toBe(true);
      await saveCheckpoint(dir, policy);
      // Relabel the checkpoint as another family, keeping its digest valid, as one written by a
      // process with that family registered would be.
      const file = path.join(dir, 'model.json');
      const json = JSON.parse(await fs.readFile(file, 'utf8')) as {
        modelTopology: { kind: string };
        weightsManifest: { weights: unknown }[];
        userDefinedMetadata: { manifest: { modelKind: string }; manifestHash: string };
      };
      json.modelTopology.kind = 'other-family';
      json.userDefinedMetadata.manifest.modelKind = 'other-family';
      const { manifest } = json.userDefinedMetadata;
      const digest = JSON.stringify({ manifest, topology: json.modelTopology, specs: json.weightsManifest[0].weights });
      json.userDefinedMetadata.manifestHash = createHash('sha256').update(digest).digest('hex');
      await fs.writeFile(file, JSON.stringify(json));
      const error = await loadCheckpoint(dir).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(SrpoError);
      expect(error).toMatchObject({ code: ErrorCode.ENVIRONMENT, kind: 'other-family' });
      expect((error as Error).message).toContain(`checkpoint ${dir}: no model family "other-family"`);
    } finally {
      policy.dispose();
      await fs.rm(dir, { recursive: true, force: true });
    }
  });
});
