#!/usr/bin/env python3
"""Generate tiny random Hugging Face causal-LM checkpoints (Llama, Qwen2, Mistral) plus reference
tokenizations and log-probs under libs/hf/fixtures/. Deterministic: re-running reproduces
byte-identical files. Usage: python3 scripts/reference/make_hf_fixtures.py [--out DIR]"""
import argparse
import collections
import copy
import json
import os
import shutil
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_text as T  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_OUT = os.path.join(REPO, "libs", "hf", "fixtures")
COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=176,
              max_position_embeddings=256, initializer_range=0.2, hidden_act="silu")


def dump_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def added(content):
    return AddedToken(content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False)


# ----------------------------------------------------------------------------------- tokenizers
def train_bytelevel(split_regex, nfc, specials, vocab_size, ignore_merges):
    """GPT-2/Llama-3/Qwen2-style byte-level BPE; specials are appended after the trained vocab."""
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials), min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([T.TRAIN_TEXT], trainer=trainer)
    d = json.loads(tok.to_str())
    d["model"]["ignore_merges"] = ignore_merges
    tok = Tokenizer.from_str(json.dumps(d))
    tok.add_special_tokens([added(s) for s in specials])
    return tok


def train_sentencepiece_bpe(vocab_size):
    """Llama-2/Mistral-style BPE: Metaspace '▁', byte_fallback with <0x00>..<0xFF> at ids 3..258."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    base = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    # Keep the 100 most frequent characters (ties by code point; the trainer's own limit_alphabet breaks
    # ties in hash order, which is not reproducible). Everything else falls back to <0xXX> bytes.
    counts = collections.Counter(T.TRAIN_TEXT.replace(" ", "▁"))
    alphabet = sorted(counts, key=lambda ch: (-counts[ch], ch))[:100]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(base), min_frequency=1, show_progress=False,
                                  initial_alphabet=alphabet, limit_alphabet=len(alphabet))
    tok.train_from_iterator([T.TRAIN_TEXT], trainer=trainer)
    d = json.loads(tok.to_str())
    trained = sorted(d["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {s: i for i, s in enumerate(base)}
    for s, _ in trained:
        assert s not in vocab, s
        vocab[s] = len(vocab)
    d["model"].update(vocab=vocab, byte_fallback=True, fuse_unk=True, unk_token="<unk>")
    # Inference: no split, like the converted Llama-2/Mistral tokenizer.json (BPE never crosses '▁' anyway).
    d["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    d["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = Tokenizer.from_str(json.dumps(d))
    tok.add_special_tokens([added(s) for s in base[:3]])
    for i, s in enumerate(base[:3]):
        assert tok.token_to_id(s) == i
    return tok


def bos_template(bos, bos_id, bytelevel):
    tp = processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                       special_tokens=[(bos, bos_id)])
    return processors.Sequence([processors.ByteLevel(trim_offsets=False), tp]) if bytelevel else tp


def added_tokens_decoder(tok):
    out = {}
    for i, t in sorted(tok.get_added_tokens_decoder().items()):
        out[str(i)] = {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                       "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
    return out


# ----------------------------------------------------------------------------------- model helpers
def randomise(model, seed, std=0.2):
    """Overwrite every parameter: matrices/embeddings N(0, std), norms 1 + 0.1·N, biases N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(std * noise)


def load_f32(path):
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    return m.eval()


@torch.no_grad()
def score(model, prompt_ids, response_ids):
    """logprobs[i] = log p(response[i] | prompt ++ response[:i]): float64 log_softmax of the f32 logits."""
    ids = list(prompt_ids) + list(response_ids)
    logits = model(input_ids=torch.tensor([ids], dtype=torch.long)).logits[0]
    assert logits.dtype == torch.float32
    lp = torch.log_softmax(logits.double(), dim=-1)
    n = len(prompt_ids)
    return [float(lp[n + i - 1, t]) for i, t in enumerate(response_ids)]


def all_scores(model, ref):
    return [score(model, c["promptTokenIds"], c["responseTokenIds"])
            for key in ("cases", "chatCases", "idCases") for c in ref[key]]


def to_t4_config(path):
    """Rewrite a transformers-5 config.json (rope_parameters, dtype, layer_types) into transformers-4 style."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    rp = dict(d.pop("rope_parameters"))
    out = {}
    for k, v in d.items():
        if k == "dtype":
            out["torch_dtype"] = v
        elif k != "layer_types":
            out[k] = v
    out["rope_theta"] = rp.pop("rope_theta")
    out["rope_scaling"] = None if rp.get("rope_type") == "default" else rp
    dump_json(path, dict(sorted(out.items())))


def config_style(path):
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    if "rope_parameters" in d and "dtype" in d and "rope_theta" not in d:
        return "t5"
    if "rope_theta" in d and "torch_dtype" in d and "rope_parameters" not in d and "layer_types" not in d:
        return "t4"
    return "mixed"


# ----------------------------------------------------------------------------------- fixtures
def tokenize_checks(tok, hf_tok, texts, add_special):
    out = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=add_special).ids
        hf_ids = hf_tok(text, add_special_tokens=add_special)["input_ids"]
        assert ids == hf_ids, (text, ids, hf_ids)
        out.append({"text": text, "ids": ids})
    return out


def build_reference(arch, tok, hf_tok, model, vocab_size, seed):
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    ref = {"architecture": arch, "transformers": transformers.__version__, "torch": torch.__version__,
           "tokenizers": tokenizers.__version__,
           "tokenization": tokenize_checks(tok, hf_tok, T.CORPUS, False),
           "tokenizationWithSpecial": tokenize_checks(tok, hf_tok, T.SPECIAL_TEXTS, True),
           "cases": [], "chatCases": [], "idCases": []}
    for prompt, response in T.CASES + [(T.LONG_PROMPT, T.LONG_RESPONSE)]:
        p, r = enc(prompt), enc(response)
        ref["cases"].append({"prompt": prompt, "response": response, "promptTokenIds": p,
                             "responseTokenIds": r, "logprobs": score(model, p, r)})
    long_case = ref["cases"][-1]
    assert 100 <= len(long_case["promptTokenIds"]) + len(long_case["responseTokenIds"]) <= 200, "long case length"
    for messages, response in zip(T.CHATS, T.CHAT_RESPONSES):
        rendered = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        p, r = enc(rendered), enc(response)
        ref["chatCases"].append({"messages": messages, "rendered": rendered, "response": response,
                                 "promptTokenIds": p, "responseTokenIds": r, "logprobs": score(model, p, r)})
    rng = np.random.RandomState(seed)
    for n_p, n_r in ((7, 9), (3, 20)):
        ids = [int(x) for x in rng.randint(0, vocab_size, size=n_p + n_r)]
        ids[n_p + 1] = vocab_size - 1
        ids[1] = vocab_size - 1
        p, r = ids[:n_p], ids[n_p:]
        ref["idCases"].append({"promptTokenIds": p, "responseTokenIds": r, "logprobs": score(model, p, r)})
    return ref


def verify_tokenizer(d, tok, ref):
    """Reload AutoTokenizer from the finished directory (final config.json) and re-check everything."""
    hf_tok = AutoTokenizer.from_pretrained(d)
    assert ref["tokenization"] == tokenize_checks(tok, hf_tok, T.CORPUS, False)
    assert ref["tokenizationWithSpecial"] == tokenize_checks(tok, hf_tok, T.SPECIAL_TEXTS, True)
    for c in ref["chatCases"]:
        rendered = hf_tok.apply_chat_template(c["messages"], add_generation_prompt=True, tokenize=False)
        assert rendered == c["rendered"], (rendered, c["rendered"])
    for c in ref["cases"] + ref["chatCases"]:
        text = c.get("rendered", c.get("prompt"))
        assert hf_tok(text, add_special_tokens=False)["input_ids"] == c["promptTokenIds"]
        assert hf_tok(c["response"], add_special_tokens=False)["input_ids"] == c["responseTokenIds"]
    return hf_tok


def write_tokenizer(d, tok, tok_config, chat_template_file=None):
    tok.save(os.path.join(d, "tokenizer.json"), pretty=True)
    tok_config = dict(tok_config, added_tokens_decoder=added_tokens_decoder(tok))
    dump_json(os.path.join(d, "tokenizer_config.json"), dict(sorted(tok_config.items())))
    specials = {k: tok_config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")
                if tok_config.get(k) is not None}
    dump_json(os.path.join(d, "special_tokens_map.json"), specials)
    if chat_template_file is not None:
        with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(chat_template_file)


def make_fixture(out, name, arch, tok, tok_config, model_kwargs, save_dtype, gen, chat_file=None,
                 shard=None, t4=False, seed=0, extra=None):
    d = os.path.join(out, name)
    os.makedirs(d)
    write_tokenizer(d, tok, tok_config, chat_file)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    config = transformers.AutoConfig.for_model(
        model_kwargs.pop("model_type"), vocab_size=vocab_size, **COMMON, **model_kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager").eval()
    randomise(model, seed)
    model.to(save_dtype).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    GenerationConfig(**gen).save_pretrained(d)
    hf_tok = AutoTokenizer.from_pretrained(d)
    ref_model = load_f32(d)  # f32 compute from the saved (possibly bf16/f16-rounded) weights
    if save_dtype == torch.float32:
        for (n1, p1), (n2, p2) in zip(sorted(model.state_dict().items()), sorted(ref_model.state_dict().items())):
            assert n1 == n2 and torch.equal(p1, p2), n1
    ref = build_reference(arch, tok, hf_tok, ref_model, vocab_size, seed)
    if extra:
        extra(d, ref, ref_model)
    if t4:
        to_t4_config(os.path.join(d, "config.json"))
    reloaded = load_f32(d)
    assert type(reloaded).__name__ == arch, type(reloaded).__name__
    assert all_scores(reloaded, ref) == all_scores(ref_model, ref), f"{name}: rewritten config changed the model"
    hf_tok = verify_tokenizer(d, tok, ref)
    dump_json(os.path.join(d, "reference.json"), ref)
    print(f"{name}: vocab {vocab_size}, config style {config_style(os.path.join(d, 'config.json'))}, "
          f"tokenizer class {type(hf_tok).__name__}, model class {type(reloaded).__name__}")


def llama_noscaling(d, ref, model):
    """logprobs-noscaling.json: the same weights scored with rope_scaling removed (plain RoPE)."""
    cfg = copy.deepcopy(model.config)
    cfg.rope_parameters = {"rope_type": "default", "rope_theta": cfg.rope_parameters["rope_theta"]}
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval()
    plain.load_state_dict(model.state_dict())
    lps = [score(plain, c["promptTokenIds"], c["responseTokenIds"]) for c in ref["cases"]]
    for lp, c in zip(lps, ref["cases"]):
        diff = max(abs(a - b) for a, b in zip(lp, c["logprobs"]))
        assert diff > 1e-3, f"rope scaling makes no difference ({diff})"
    dump_json(os.path.join(d, "logprobs-noscaling.json"), {
        "note": "cases[i] scored with rope_parameters {rope_type: default, rope_theta: 50000} (no llama3 scaling)",
        "rope_parameters": cfg.rope_parameters, "logprobs": lps[0], "cases": lps})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    out = os.path.abspath(ap.parse_args().out)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}")
    for name in ("llama", "qwen2", "mistral"):  # stale files (incl. other scripts' outputs) go with them
        if os.path.isdir(os.path.join(out, name)):
            shutil.rmtree(os.path.join(out, name))
    os.makedirs(out, exist_ok=True)

    # 1. Llama (Llama-3 style): F32, two shards, llama3 rope scaling, GQA 2, untied; t4-style config.
    ll_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = train_bytelevel(T.LLAMA3_SPLIT, False, ll_specials, 480, ignore_merges=True)
    bos, eot, eos = (tok.token_to_id(s) for s in ("<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"))
    tok.post_processor = bos_template("<|begin_of_text|>", bos, bytelevel=True)
    make_fixture(out, "llama", "LlamaForCausalLM", tok, {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": T.LLAMA3_TEMPLATE,
        "clean_up_tokenization_spaces": True, "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 256, "tokenizer_class": "PreTrainedTokenizerFast"},
        dict(model_type="llama", num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
             rope_theta=50000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
             bos_token_id=bos, eos_token_id=eos),
        torch.float32, dict(bos_token_id=bos, eos_token_id=[eos, eot], do_sample=True, temperature=0.6, top_p=0.9),
        shard="400KB", t4=True, seed=1, extra=llama_noscaling)

    # 2. Qwen2: BF16 single file, tied, GQA 4, q/k/v biases, ChatML template in chat_template.jinja; t5 config.
    tok = train_bytelevel(T.QWEN2_SPLIT, True, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 448,
                          ignore_merges=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    make_fixture(out, "qwen2", "Qwen2ForCausalLM", tok, {
        "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "clean_up_tokenization_spaces": False, "errors": "replace", "model_max_length": 256,
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer"},
        dict(model_type="qwen2", num_key_value_heads=1, tie_word_embeddings=True, rms_norm_eps=1e-6,
             rope_theta=1000000.0, use_sliding_window=False, sliding_window=None, max_window_layers=2,
             bos_token_id=eot, eos_token_id=im_end),
        torch.bfloat16, dict(bos_token_id=eot, eos_token_id=[im_end, eot], pad_token_id=eot, do_sample=True,
                             temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05),
        chat_file=T.CHATML_TEMPLATE, seed=2)

    # 3. Mistral (v0.1 style): F16 single file, linear rope scaling x2, GQA 2, untied; t4-style config.
    tok = train_sentencepiece_bpe(512)
    tok.post_processor = bos_template("<s>", 1, bytelevel=False)
    make_fixture(out, "mistral", "MistralForCausalLM", tok, {
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "chat_template": T.MISTRAL_TEMPLATE, "clean_up_tokenization_spaces": False,
        "legacy": False, "model_max_length": 256, "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer"},
        dict(model_type="mistral", num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
             rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 2.0}, sliding_window=None,
             bos_token_id=1, eos_token_id=2),
        torch.float16, dict(bos_token_id=1, eos_token_id=2), t4=True, seed=3)

    total = sum(os.path.getsize(os.path.join(r, f)) for n in ("llama", "qwen2", "mistral")
                for r, _, fs in os.walk(os.path.join(out, n)) for f in fs)
    print(f"wrote {out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
