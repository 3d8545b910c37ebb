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


def completion_logps(model, prompt, comp, temperature):
    """Log-probs (at `temperature`) of G completions of one unpadded prompt (1, P), the prompt run
    once: its cache is repeated G times, so the prompt's tokens cost one pass instead of G. The
    gradient still flows through the prompt's keys and values (LoRA changes them too)."""
    import torch

    g = comp.shape[0]
    out = model(input_ids=prompt, use_cache=True)
    cache = out.past_key_values
    cache.batch_repeat_interleave(g)
    rest = model(input_ids=comp[:, :-1], past_key_values=cache, use_cache=False).logits
    logits = torch.cat([out.logits[:, -1:, :].expand(g, 1, -1), rest], dim=1) / temperature
    return torch.log_softmax(logits.float(), -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)


def full_logps(model, prompt, comp, temperature):
    """The same by one pass over prompt + completion per sample: the reference for the check."""
    import torch

    g = comp.shape[0]
    seqs = torch.cat([prompt.expand(g, -1), comp], dim=1)
    logits = model(input_ids=seqs).logits[:, prompt.shape[1] - 1:-1, :] / temperature
    return torch.log_softmax(logits.float(), -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)


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
    ap.add_argument("--check", type=int, default=1, help="check the shared-prompt log-probs against full passes first")
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

    if a.check:
        # The shared-prompt pass must give the full pass's log-probs (LoRA on, random completions).
        with torch.no_grad():
            pr = prompt_ids(tok, [held[0]], a.style)["input_ids"]
            cp = torch.randint(100, 1000, (3, 7))
            d = (completion_logps(model, pr, cp, 0.9) - full_logps(model, pr, cp, 0.9)).abs().max().item()
        emit({"check_max_abs_diff": d})
        assert d < 1e-3, d
    t0 = time.time()
    k, n = evaluate(tok, model, held, a.max_new, a.style)
    emit({"update": 0, "heldout": k / n, "ci": wilson(k, n), "seconds": time.time() - t0})
    update = 0
    t_train = time.time()  # --minutes counts the updates (and any evaluations between them), not the first evaluation
    while time.time() - t_train < a.minutes * 60:
        problems = []
        while len(problems) < a.problems:
            p = wp.generate(train_r, s)
            if p.text not in held_texts:
                problems.append(p)
        model.eval()
        tg = time.time()
        # One generate call for all problems (left-padded), then each problem's G samples are paired
        # with its unpadded prompt for the shared-prompt training pass.
        enc = prompt_ids(tok, problems, a.style)
        with torch.no_grad():
            seqs = model.generate(**enc, max_new_tokens=a.max_new, do_sample=True, temperature=a.temperature, top_p=1.0, top_k=0,
                                  num_return_sequences=a.group, pad_token_id=tok.pad_token_id, eos_token_id=2)
        allcomp = seqs[:, enc["input_ids"].shape[1]:]
        texts = tok.batch_decode(allcomp, skip_special_tokens=True)
        comps = [(prompt_ids(tok, [p], a.style)["input_ids"], allcomp[i * a.group:(i + 1) * a.group]) for i, p in enumerate(problems)]
        plen = comps[0][0].shape[1]
        rewards = torch.tensor([float(wp.parse_answer(t) == problems[i // a.group].answer) for i, t in enumerate(texts)])
        g = rewards.view(len(problems), a.group)
        adv = (g - g.mean(dim=1, keepdim=True))
        nondeg = int(((g.sum(1) > 0) & (g.sum(1) < a.group)).sum())
        tg = time.time() - tg
        tt = time.time()
        loss_val = 0.0
        ntok = 0.0
        if nondeg > 0:
            model.train()
            opt.zero_grad()
            masks = []
            for prompt, comp in comps:
                # Tokens up to and including the first end token; generate pads after it.
                is_end = comp == 2
                masks.append((~((is_end.cumsum(1) - is_end.long()) > 0)).float())
            total = sum(float(m.sum()) for m in masks)
            for i, ((prompt, comp), mask) in enumerate(zip(comps, masks)):
                if float(g[i].sum()) in (0.0, float(a.group)):
                    continue  # degenerate: zero advantage, no gradient
                logp = completion_logps(model, prompt, comp, a.temperature)
                loss = -(adv[i].unsqueeze(1) * logp * mask).sum() / total
                loss.backward()
                loss_val += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        ntok = float(sum(float(m.sum()) for m in masks) / len(texts)) if nondeg > 0 else 0.0
        update += 1
        emit({"update": update, "prompt_tokens": plen, "reward": float(rewards.mean()), "nondegenerate": nondeg, "loss": loss_val,
              "mean_tokens": ntok, "gen_s": round(tg, 1), "train_s": round(time.time() - tt, 1), "seconds": round(time.time() - t0, 1)})
        if a.eval_every and update % a.eval_every == 0:
            k, n = evaluate(tok, model, held, a.max_new, a.style)
            emit({"update": update, "heldout": k / n, "ci": wilson(k, n), "seconds": round(time.time() - t0, 1)})
    k, n = evaluate(tok, model, held, a.max_new, a.style)
    emit({"update": update, "heldout": k / n, "ci": wilson(k, n), "seconds": round(time.time() - t0, 1), "final": True})


if __name__ == "__main__":
    main()
