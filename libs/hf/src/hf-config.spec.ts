import { parseHfConfig, UnsupportedConfigError } from './hf-config';

/** A Llama 3.1-like config in transformers 4 style (values from Meta-Llama-3.1-8B's config.json, shrunk). */
const llamaT4 = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  vocab_size: 512,
  hidden_size: 64,
  intermediate_size: 176,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 256,
  hidden_act: 'silu',
  rms_norm_eps: 1e-5,
  rope_theta: 500000,
  rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 32 },
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
  bos_token_id: 1,
  eos_token_id: [2, 3],
};

/** The same model as transformers 5 writes it. */
const llamaT5 = {
  ...Object.fromEntries(Object.entries(llamaT4).filter(([k]) => !['rope_theta', 'rope_scaling', 'torch_dtype'].includes(k))),
  rope_parameters: { rope_type: 'llama3', rope_theta: 500000, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 32 },
  layer_types: ['full_attention', 'full_attention'],
  dtype: 'bfloat16',
};

function refusal(raw: object): UnsupportedConfigError {
  try {
    parseHfConfig(raw);
  } catch (e) {
    if (e instanceof UnsupportedConfigError) return e;
    throw e;
  }
  throw new Error('expected the config to be refused');
}

describe('parseHfConfig', () => {
  it('reads a transformers 4 Llama config', () => {
    const c = parseHfConfig(llamaT4);
    expect(c).toMatchObject({
      architecture: 'LlamaForCausalLM',
      headDim: 16,
      numKvHeads: 2,
      ropeTheta: 500000,
      ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 32 },
      dtype: 'bfloat16',
      qkvBias: false,
      oBias: false,
      tieWordEmbeddings: false,
      eosTokenIds: [2, 3],
    });
  });

  it('resolves the transformers 5 style of the same model to the same config', () => {
    expect(parseHfConfig(llamaT5)).toEqual(parseHfConfig(llamaT4));
  });

  it('reads the old rope_scaling "type" key and linear scaling', () => {
    const c = parseHfConfig({ ...llamaT4, rope_scaling: { type: 'linear', factor: 2 } });
    expect(c.ropeScaling).toEqual({ type: 'linear', factor: 2 });
  });

  it('Qwen2: q/k/v biases always, no o_proj bias; a disabled sliding window is no window', () => {
    const c = parseHfConfig({
      ...llamaT4,
      architectures: ['Qwen2ForCausalLM'],
      model_type: 'qwen2',
      rope_scaling: null,
      use_sliding_window: false,
      sliding_window: 4096,
      tie_word_embeddings: true,
    });
    expect([c.qkvBias, c.oBias, c.tieWordEmbeddings, c.ropeScaling.type]).toEqual([true, false, true, 'none']);
    expect(
      parseHfConfig({ ...llamaT4, architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', sliding_window: null, use_sliding_window: false }).qkvBias,
    ).toBe(true);
  });

  it('Llama attention_bias puts biases on q/k/v and o; mlp_bias on the MLP', () => {
    const c = parseHfConfig({ ...llamaT4, attention_bias: true, mlp_bias: true });
    expect([c.qkvBias, c.oBias, c.mlpBias]).toEqual([true, true, true]);
  });

  it('Mistral with sliding_window null has no window; head_dim defaults to hidden / heads', () => {
    const c = parseHfConfig({ ...llamaT4, architectures: ['MistralForCausalLM'], model_type: 'mistral', sliding_window: null, rope_scaling: null });
    expect([c.architecture, c.headDim]).toEqual(['MistralForCausalLM', 16]);
  });

  it.each([
    [{ architectures: ['GPT2LMHeadModel'] }, 'architectures'],
    [{ hidden_act: 'gelu' }, 'hidden_act="gelu"'],
    [{ architectures: ['MistralForCausalLM'], model_type: 'mistral', sliding_window: 32 }, 'sliding_window=32'],
    [{ architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', use_sliding_window: true, sliding_window: 64 }, 'sliding_window=64'],
    [{ rope_scaling: { rope_type: 'yarn', factor: 4 } }, 'rope_scaling.rope_type="yarn"'],
    [{ rope_scaling: { type: 'dynamic', factor: 2 } }, 'rope_scaling.type="dynamic"'],
    [{ rope_scaling: { rope_type: 'llama3', factor: 8 } }, 'rope_scaling.low_freq_factor'],
    [{ num_key_value_heads: 3 }, 'num_key_value_heads=3'],
    [{ quantization_config: { quant_method: 'gptq' } }, 'quantization_config.quant_method="gptq"'],
    [{ torch_dtype: 'float64' }, 'torch_dtype="float64"'],
    [{ partial_rotary_factor: 0.5 }, 'partial_rotary_factor=0.5'],
    [{ vocab_size: 0 }, 'vocab_size=0'],
    [{ model_type: 'gemma' }, 'model_type="gemma"'],
  ])('refuses %j naming %s', (patch, named) => {
    const e = refusal({ ...llamaT4, ...patch });
    expect(e.message.startsWith(`config.json ${named}`)).toBe(true);
    expect(e.message.split('\n')).toHaveLength(1);
  });

  it('refuses a transformers 5 layer_types entry other than full_attention, naming its index', () => {
    expect(refusal({ ...llamaT5, layer_types: ['full_attention', 'sliding_attention'] }).message).toMatch(/^config\.json layer_types\[1\]="sliding_attention"/);
  });

  it('refuses a transformers 5 rope type it does not implement, under rope_parameters', () => {
    expect(refusal({ ...llamaT5, rope_parameters: { rope_type: 'longrope', rope_theta: 1e4 } }).message).toMatch(
      /^config\.json rope_parameters\.rope_type="longrope"/,
    );
  });

  it('accepts a window at least as long as the context (the same model)', () => {
    expect(parseHfConfig({ ...llamaT4, architectures: ['MistralForCausalLM'], model_type: 'mistral', sliding_window: 256 }).architecture).toBe(
      'MistralForCausalLM',
    );
  });
});
