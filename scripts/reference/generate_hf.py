#!/usr/bin/env python3
"""Greedy generation with transformers' KV cache: the reference for srpo serve's cached decoding.

  python3 scripts/reference/generate_hf.py MODEL_DIR PROMPTS.json MAX_NEW_TOKENS [STOP_ID ...]

PROMPTS.json: a JSON array of token-id lists. Each prompt is generated alone (batch 1, no padding)
with `model.generate(do_sample=False, use_cache=True)`, ending at MAX_NEW_TOKENS or after a stop id
(kept, as srpo serve keeps it). Prints one JSON line: [{"ids": [...], "logprobs": [...]}, ...] with
logprobs[i] = log_softmax(logits at step i)[ids[i]] at temperature 1, float32 logits, float64 softmax.
Used by test/kv-cache-smollm2.int-spec.ts.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    model_dir, prompts_file, max_new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    stops = [int(s) for s in sys.argv[4:]]
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with open(prompts_file) as f:
        prompts = json.load(f)
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            g = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                use_cache=True,
                max_new_tokens=max_new,
                eos_token_id=stops or None,
                pad_token_id=stops[0] if stops else 0,
                output_logits=True,
                return_dict_in_generate=True,
            )
            new = g.sequences[0, len(p):].tolist()
            logprobs = [float(torch.log_softmax(g.logits[i][0].double(), dim=-1)[t]) for i, t in enumerate(new)]
            out.append({"ids": new, "logprobs": logprobs})
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
