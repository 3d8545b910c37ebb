#!/usr/bin/env python3
"""Writes a LoRA adapter with peft itself, for the loader's test (test/hf-lora.int-spec.ts).

  python3 scripts/reference/make_peft_fixture.py BASE_DIR OUT_DIR R ALPHA TARGETS SEED

TARGETS is a comma-separated module list (q_proj,v_proj,...). The adapter is
get_peft_model(base, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS,
task_type="CAUSAL_LM")): lora_A from peft's own init (kaiming-uniform, a=sqrt(5), under
torch.manual_seed(SEED)); lora_B, which peft initialises to zero, is replaced by seeded
N(0, 0.1^2) values so that the adapter changes the model. Saved with save_pretrained
(adapter_config.json + adapter_model.safetensors, float32).
"""
import sys

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def main() -> None:
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    base_dir, out_dir, r, alpha, targets, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split(","), int(sys.argv[6])
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    model = get_peft_model(base, LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    model.save_pretrained(out_dir)


if __name__ == "__main__":
    main()
