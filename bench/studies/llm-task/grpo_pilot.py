"""A tiny GRPO + LoRA pilot in PyTorch: does the base model's success on one variant move within
minutes of CPU? On-policy (one gradient step per batch, so the ratio is 1 and the clipped
objective reduces to the group-baseline policy gradient), G samples per problem, advantage =
reward − group mean (degenerate groups contribute nothing), token-mean loss.

  python3 bench/studies/llm-task/grpo_pilot.py --variant addsub-20 --minutes 12 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import word_problems as wp  # noqa: E402
from probe import load, prompt_ids, wilson  # noqa: E402


def evaluate(tok, model, problems, max_new, style, batch=16):
    import torch

    ok = 0
    model.eval()
    for i in range(0, len(problems), batch):
        chunk = problems[i:i + batch]
        enc = prompt_ids(tok, chunk, style)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=2)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        ok += sum(wp.parse_answer(t) == p.answer for t, p in zip(texts, chunk))
    return ok, len(problems)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/srpo/models/smollm2-135m-instruct"))
    ap.add_argument("--variant", default="add-10")
    ap.add_argument("--minutes", type=float, default=12)
    ap.add_argument("--problems", type=int, default=4, help="problems per update")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--style", default="shots", choices=["tagged", "shots", "shots-long"])
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    ap.add_argument("--eval-size", type=int, default=96)
    ap.add_argument("--eval-every", type=int, default=0, help="updates between evaluations (0: start and end only)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", default=None)
    a = ap.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tok, base = load(a.model)
    model = get_peft_model(base, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0, target_modules=a.targets.split(",")))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr, weight_decay=0.0)
    s = wp.VARIANTS[a.variant]
    held = [wp.generate(random.Random(f"held:{i}"), s) for i in range(a.eval_size)]
    held_texts = {p.text for p in held}
    train_r = random.Random(f"train:{a.seed}")
    log = open(a.log, "w") if a.log else None

    def emit(d):
        print(json.dumps(d), flush=True)
        if log:
            log.write(json.dumps(d) + "\n")
            log.flush()

    t0 = time.time()
    k, n = evaluate(tok, model, held, a.max_new, a.style)
    emit({"update": 0, "heldout": k / n, "ci": wilson(k, n), "seconds": time.time() - t0})
    update = 0
    while time.time() - t0 < a.minutes * 60:
        problems = []
        while len(problems) < a.problems:
            p = wp.generate(train_r, s)
            if p.text not in held_texts:
                problems.append(p)
        enc = prompt_ids(tok, problems, a.style)
        plen = enc["input_ids"].shape[1]
        model.eval()
        tg = time.time()
        with torch.no_grad():
            seqs = model.generate(**enc, max_new_tokens=a.max_new, do_sample=True, temperature=a.temperature, top_p=1.0, top_k=0,
                                  num_return_sequences=a.group, pad_token_id=tok.pad_token_id, eos_token_id=2)
        comp = seqs[:, plen:]
        texts = tok.batch_decode(comp, skip_special_tokens=True)
        rewards = torch.tensor([float(wp.parse_answer(t) == problems[i // a.group].answer) for i, t in enumerate(texts)])
        g = rewards.view(len(problems), a.group)
        adv = (g - g.mean(dim=1, keepdim=True)).view(-1)
        nondeg = int(((g.sum(1) > 0) & (g.sum(1) < a.group)).sum())
        # Completion mask: tokens up to and including the first end token.
        is_end = (comp == 2)
        after_end = (is_end.cumsum(1) - is_end.long()) > 0
        mask = (~after_end).float()
        tg = time.time() - tg
        tt = time.time()
        loss_val = 0.0
        if nondeg > 0:
            model.train()
            attn = torch.cat([enc["attention_mask"].repeat_interleave(a.group, 0), mask.long()], dim=1)
            logits = model(input_ids=seqs, attention_mask=attn).logits[:, plen - 1:-1, :] / a.temperature
            logp = torch.log_softmax(logits.float(), -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
            loss = -(adv.unsqueeze(1) * logp * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss_val = float(loss)
        update += 1
        emit({"update": update, "prompt_tokens": plen, "reward": float(rewards.mean()), "nondegenerate": nondeg, "loss": loss_val,
              "mean_tokens": float(mask.sum(1).mean()), "gen_s": round(tg, 1), "train_s": round(time.time() - tt, 1), "seconds": round(time.time() - t0, 1)})
        if a.eval_every and update % a.eval_every == 0:
            k, n = evaluate(tok, model, held, a.max_new, a.style)
            emit({"update": update, "heldout": k / n, "ci": wilson(k, n), "seconds": round(time.time() - t0, 1)})
    k, n = evaluate(tok, model, held, a.max_new, a.style)
    emit({"update": update, "heldout": k / n, "ci": wilson(k, n), "seconds": round(time.time() - t0, 1), "final": True})


if __name__ == "__main__":
    main()
