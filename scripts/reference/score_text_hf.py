#!/usr/bin/env python3
"""Token ids and per-token log-probs of text and chat cases under a Hugging Face directory, with transformers.

  python3 scripts/reference/score_text_hf.py MODEL_DIR CASES.json

CASES.json: [{"prompt": str, "response": str} | {"messages": [{role, content}, ...], "response": str}, ...].
Tokenized as `srpo model score` documents it, independently of the project's tokenizer:
  - text: prompt and response each `tokenizer(text, add_special_tokens=False)`;
  - chat: `apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`, then encoded
    the same way (the template writes any BOS), the response as for text.
Prints a JSON array of {"promptTokenIds", "responseTokenIds", "logprobs"}, with
logprobs[i] = log p(response[i] | prompt ++ response[<i]) from one forward pass in float32 (eager
attention, weights loaded as float32), log_softmax in float64 (as score_hf.py).
Used by test/smollm2-score.int-spec.ts on the real model.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def encode(tok, text: str) -> list:
    return tok(text, add_special_tokens=False)["input_ids"]


def main() -> None:
    model_dir, cases_file = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with open(cases_file) as f:
        cases = json.load(f)
    out = []
    with torch.no_grad():
        for c in cases:
            if "messages" in c:
                prompt = encode(tok, tok.apply_chat_template(c["messages"], add_generation_prompt=True, tokenize=False))
            else:
                prompt = encode(tok, c["prompt"])
            response = encode(tok, c["response"])
            seq = prompt + response
            logits = model(input_ids=torch.tensor([seq[:-1]])).logits[0].float()
            logp = torch.log_softmax(logits.double(), dim=-1)
            p = len(prompt)
            out.append({
                "promptTokenIds": prompt,
                "responseTokenIds": response,
                "logprobs": [float(logp[p - 1 + i, t]) for i, t in enumerate(response)],
            })
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
