import { sampleEvents, sealOutput } from '@srpo/events';
import { outputText } from './output-text';

const table = { decode: (ids: readonly number[]) => ids.map((i) => String.fromCharCode(96 + (i % 26))).join('') };

describe('outputText', () => {
  it('reads an output in the clear and refuses a sealed one instead of judging empty text', () => {
    const output = { ...sampleEvents(1).AgentOutput, contextTokenIds: [1, 2], responseTokenIds: [3, 4, 5] };
    const clear = outputText(output, table, 100);
    expect(clear.ok && [clear.text.prompt, clear.text.response]).toEqual(['ab', 'cde']);
    const sealed = outputText(sealOutput(output, { keyId: 'k', key: Buffer.alloc(32, 7) }), table, 100);
    expect(sealed).toEqual({ ok: false, reason: 'sealed_content', problem: `output ${output.outputId} is sealed; srpo judge reads content in the clear only` });
  });
});
