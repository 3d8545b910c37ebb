import fc from 'fast-check';
import { SrpoError } from '@srpo/core';
import { decodeSafetensorsTensor, encodeSafetensors, parseSafetensorsHeader } from '@srpo/hf';
import { checkCase, FuzzTally, fuzzParameters, mutatedBytes } from './fuzz';

const BOUND_MS = 250;

/** Small valid files: F32, F16 and BF16 tensors of a few shapes, with and without metadata. */
const seeds = [
  encodeSafetensors([{ name: 'a', shape: [2, 3], data: Float32Array.from([1, 2, 3, 4, 5, 6]) }]),
  encodeSafetensors(
    [
      { name: 'model.layers.0.w', shape: [4], data: Float32Array.from([0.5, -1, 2, 3]), dtype: 'F16' },
      { name: 'b', shape: [1, 2], data: Float32Array.from([7, 8]), dtype: 'BF16' },
      { name: 'scalar', shape: [], data: Float32Array.from([9]) },
    ],
    { format: 'pt', note: 'x' },
  ),
].map((b) => new Uint8Array(b));

/** The header parse and, when it passes, every tensor's decode: values, or an SrpoError naming the problem. */
function parseAll(bytes: Uint8Array): void {
  const header = parseSafetensorsHeader(bytes, 'fuzz.safetensors');
  for (const name of header.tensors.keys()) decodeSafetensorsTensor(header, name, bytes);
}

describe('fuzz: the safetensors header parser and tensor decoder on mutated files', () => {
  it('10,000 mutations: a header and tensors or an SrpoError, each within 250 ms', () => {
    const tally = new FuzzTally();
    fc.assert(
      fc.property(mutatedBytes(seeds), (bytes) => {
        tally.add(
          checkCase(
            () => parseAll(bytes),
            (e) => e instanceof SrpoError,
            BOUND_MS,
            () => Buffer.from(bytes).toString('base64'),
          ),
        );
      }),
      fuzzParameters(10_000),
    );
    expect(tally.values).toBeGreaterThan(100);
    expect(tally.errors).toBeGreaterThan(1_000);
  });
});
