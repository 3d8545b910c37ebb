#!/usr/bin/env python3
"""Reference gradients of one SRPO loss on the tiny HF fixtures, from PyTorch autograd.

Run after make_hf_fixtures.py:  python3 scripts/reference/make_hf_grad_fixture.py

For each fixture in FIXTURES it writes, beside the model:
  grad-case.json            the mini-batch (active sets with contextTokens, responseTokens,
                            logpOld, advantage), the objective settings and the loss
  grad-reference.safetensors d loss / d w for every weight, float32, under the HF names

The loss is SRPO's (the project's libs/srpo `srpo` objective, event reduction sqrt):
  rho_s = exp( (1/sqrt(K_s)) * sum_members sum_tokens mask * (logp_new - logp_old) )
  loss  = - mean_s min(rho_s * A_s, clip(rho_s, 1 - clip_low, 1 + clip_high) * A_s)
logp_new is log_softmax of the model's float32 logits at temperature 1 (eager attention).
logp_old is logp_new plus seeded noise, so ratios differ from 1 and some sets are clipped.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIXTURES = os.path.join(ROOT, "libs", "hf", "fixtures")
NAMES = ["llama", "qwen2"]
CLIP_LOW = 0.2
CLIP_HIGH = 0.2
SET_SIZES = [1, 2, 3, 1]
ADVANTAGES = [1.0, -0.7, 0.4, -1.3]


def make_sets(vocab: int, gen: torch.Generator):
    sets = []
    for s, k in enumerate(SET_SIZES):
        members = []
        for j in range(k):
            c = int(torch.randint(3, 9, (1,), generator=gen))
            r = int(torch.randint(2, 7, (1,), generator=gen))
            members.append({
                "outputId": f"o{s}-{j}",
                "contextTokens": torch.randint(0, vocab, (c,), generator=gen).tolist(),
                "responseTokens": torch.randint(0, vocab, (r,), generator=gen).tolist(),
            })
        sets.append({"setId": f"set{s}", "advantage": ADVANTAGES[s], "members": members})
    return sets


def member_logps(model, member):
    seq = member["contextTokens"] + member["responseTokens"]
    ids = torch.tensor([seq[:-1]])
    logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    c = len(member["contextTokens"])
    targets = torch.tensor(member["responseTokens"])
    rows = torch.arange(c - 1, c - 1 + len(member["responseTokens"]))
    return logp[rows, targets]


def srpo_loss(model, sets):
    surr = []
    for s in sets:
        k = len(s["members"])
        total = sum((member_logps(model, m) - torch.tensor(m["logpOld"])).sum() for m in s["members"])
        rho = torch.exp(total / (k ** 0.5))
        a = s["advantage"]
        surr.append(torch.minimum(rho * a, rho.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH) * a))
    return -torch.stack(surr).mean(), [float(x) for x in surr]


def main() -> None:
    torch.use_deterministic_algorithms(True)
    for name in NAMES:
        d = os.path.join(FIXTURES, name)
        if not os.path.exists(os.path.join(d, "config.json")):
            sys.exit(f"{d}: run scripts/reference/make_hf_fixtures.py first")
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        gen = torch.Generator().manual_seed(17)
        sets = make_sets(model.config.vocab_size, gen)
        with torch.no_grad():
            for s in sets:
                for m in s["members"]:
                    lp = member_logps(model, m)
                    noise = torch.randn(lp.shape, generator=gen) * 0.15
                    m["logpOld"] = [float(x) for x in (lp + noise)]
        model.zero_grad(set_to_none=True)
        loss, surr = srpo_loss(model, sets)
        loss.backward()
        grads = {}
        for pname, p in model.named_parameters():
            grads[pname] = p.grad.detach().float().contiguous() if p.grad is not None else torch.zeros_like(p)
        # Tied models report the shared matrix once, under the embedding's name.
        save_file(grads, os.path.join(d, "grad-reference.safetensors"))
        case = {
            "objective": {"objective": "srpo", "eventReduction": "sqrt", "clipLow": CLIP_LOW, "clipHigh": CLIP_HIGH},
            "sets": sets,
            "loss": float(loss),
            "surrogates": surr,
            "torch": torch.__version__,
        }
        with open(os.path.join(d, "grad-case.json"), "w") as f:
            json.dump(case, f, indent=1)
            f.write("\n")
        print(f"{name}: loss {float(loss):.6f}, {len(grads)} gradient tensors")


if __name__ == "__main__":
    main()
