#!/usr/bin/env python3
"""Per-token log-probs of token-id cases under a Hugging Face directory, with transformers.

  python3 scripts/reference/score_hf.py MODEL_DIR CASES.json

CASES.json: [{"promptTokenIds": [...], "responseTokenIds": [...]}, ...]. Prints a JSON array
of log-prob lists: logprobs[i] = log p(response[i] | prompt ++ response[<i]), from float32
logits (eager attention, weights loaded as float32), log_softmax in float64.
Used by test/hf-roundtrip.int-spec.ts to check that exported directories load in transformers.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def score(model, cases):
    """logprobs[i] = log p(response[i] | prompt ++ response[<i]) per case, from float32 logits, log_softmax in float64."""
    out = []
    with torch.no_grad():
        for c in cases:
            seq = c["promptTokenIds"] + c["responseTokenIds"]
            logits = model(input_ids=torch.tensor([seq[:-1]])).logits[0].float()
            logp = torch.log_softmax(logits.double(), dim=-1)
            p = len(c["promptTokenIds"])
            out.append([float(logp[p - 1 + i, t]) for i, t in enumerate(c["responseTokenIds"])])
    return out


def main() -> None:
    model_dir, cases_file = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with open(cases_file) as f:
        cases = json.load(f)
    json.dump(score(model, cases), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
