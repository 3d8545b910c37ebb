#!/usr/bin/env python3
"""transformers' side of bench/serving/decode.ts: greedy `generate` with its KV cache, timed.

  python3 bench/serving/torch_decode.py TASK.json

TASK.json: {"model": DIR, "prompts": [[ids], ...], "batches": [1, 16], "tokens": 128, "threads": N}.
For each batch size B: rows are prompts[0..B) (cycled), left-padded with an attention mask, one
`generate(do_sample=False, max_new_tokens=N)` call with no end token (every row makes exactly N
tokens and may pick the end token like any other, as srpo's side with no stop ids). Time to first token: the same call with max_new_tokens=1.
Prints one JSON line: per batch size the seconds, tokens/s, time to first token, the new ids per row,
and the process's peak RSS so far (getrusage; monotone across batch sizes).
"""
import json
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def batch_inputs(prompts, b, pad):
    rows = [prompts[i % len(prompts)] for i in range(b)]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask, width


def generate(model, ids, mask, n, pad):
    return model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, use_cache=True, max_new_tokens=n, pad_token_id=pad
    )


def main() -> None:
    with open(sys.argv[1]) as f:
        task = json.load(f)
    torch.set_num_threads(task["threads"])
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(task["model"], dtype=torch.float32)
    model.eval()
    load_s = time.perf_counter() - t0
    pad = model.generation_config.pad_token_id or 0
    # No end token: every row runs the full N tokens (min_new_tokens would instead forbid the end token and change the ids).
    model.generation_config.eos_token_id = None
    results = []
    with torch.no_grad():
        for b in task["batches"]:
            ids, mask, width = batch_inputs(task["prompts"], b, pad)
            generate(model, ids, mask, 4, pad)  # warm-up
            t = time.perf_counter()
            generate(model, ids, mask, 1, pad)
            ttft = time.perf_counter() - t
            n = task["tokens"]
            t = time.perf_counter()
            out = generate(model, ids, mask, n, pad)
            seconds = time.perf_counter() - t
            results.append(
                {
                    "batch": b,
                    "tokens": n,
                    "seconds": seconds,
                    "tokensPerSecond": b * n / seconds,
                    "decodeTokensPerSecond": b * (n - 1) / max(seconds - ttft, 1e-9),
                    "timeToFirstTokenMs": ttft * 1000,
                    "peakRssBytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                    "ids": out[:, width:].tolist(),
                }
            )
    print(json.dumps({"side": f"transformers {__import__('transformers').__version__} / torch {torch.__version__}", "loadSeconds": load_s, "results": results}))


if __name__ == "__main__":
    main()
