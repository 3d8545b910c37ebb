#!/usr/bin/env python3
"""Log-probs (or SRPO-loss gradients) of a Hugging Face base model with a peft LoRA adapter.

  python3 scripts/reference/score_peft.py BASE_DIR ADAPTER_DIR CASES.json
  python3 scripts/reference/score_peft.py BASE_DIR ADAPTER_DIR --grad GRAD_CASE.json OUT.safetensors

The model is PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE_DIR,
dtype=float32, attn_implementation="eager"), ADAPTER_DIR): peft's own reading of the adapter
directory (adapter_config.json, adapter_model.safetensors) and peft's LoRA forward.

Scoring (as score_hf.py): CASES.json is [{"promptTokenIds": [...], "responseTokenIds": [...]}];
prints a JSON array of lists, logprobs[i] = log p(response[i] | prompt ++ response[<i]), from
float32 logits, log_softmax in float64.

--grad: GRAD_CASE.json is a grad-case.json of make_hf_grad_fixture.py (sets with contextTokens,
responseTokens, logpOld, advantage); the loss is that script's SRPO loss (srpo_loss, imported
from it, so both use one definition). Backpropagates with torch autograd, writes d loss / d p
for every LoRA factor to OUT.safetensors under the keys get_peft_model_state_dict saves
(adapter name removed: base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight), and
prints {"loss": ...}. Used by test/hf-lora.int-spec.ts.
"""
import json
import sys

import torch
from peft import PeftModel
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from make_hf_grad_fixture import srpo_loss
from score_hf import score


def load(base_dir: str, adapter_dir: str, trainable: bool):
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=trainable)
    model.eval()  # dropout off; the adapters we compare have lora_dropout 0 anyway
    return model


def grads(model, case_file: str, out_file: str) -> None:
    with open(case_file) as f:
        case = json.load(f)
    model.zero_grad(set_to_none=True)
    loss, _ = srpo_loss(model, case["sets"])
    loss.backward()
    g = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if ".lora_A." not in name and ".lora_B." not in name:
            sys.exit(f"unexpected trainable parameter {name}")
        key = name.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")
        g[key] = p.grad.detach().float().contiguous() if p.grad is not None else torch.zeros_like(p)
    save_file(g, out_file)
    json.dump({"loss": float(loss), "tensors": len(g)}, sys.stdout)
    sys.stdout.write("\n")


def main() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if len(sys.argv) == 6 and sys.argv[3] == "--grad":
        grads(load(sys.argv[1], sys.argv[2], True), sys.argv[4], sys.argv[5])
        return
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[3]) as f:
        cases = json.load(f)
    json.dump(score(load(sys.argv[1], sys.argv[2], False), cases), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
