"""How well does the base model solve each candidate difficulty, and do its samples disagree?

For each variant: N problems; one greedy answer and G sampled answers per problem (temperature T).
Reports greedy success, sampled success, and the fraction of non-degenerate groups (the G samples'
rewards not all equal, so group-relative advantages are not all zero), with 95 % Wilson intervals.

  python3 bench/studies/llm-task/probe.py --problems 24 --group 8 --temperature 0.8 --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import word_problems as wp  # noqa: E402


def wilson(k: int, n: int, z: float = 1.96):
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def load(model_dir: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    model.eval()
    return tok, model


def prompt_ids(tok, problems, style="shots"):
    texts = [tok.apply_chat_template(wp.messages(p, style), tokenize=False, add_generation_prompt=True) for p in problems]
    return tok(texts, return_tensors="pt", padding=True)


def generate(tok, model, problems, n: int, temperature: float | None, max_new: int, style: str = "shots", proposed=None):
    """n completions per problem (greedy when temperature is None); returns lists of texts.
    With `proposed` (one per problem), the verifier's prompt instead of the solver's."""
    import torch

    if proposed is None:
        enc = prompt_ids(tok, problems, style)
    else:
        texts = [tok.apply_chat_template(wp.verifier_messages(p, x), tokenize=False, add_generation_prompt=True) for p, x in zip(problems, proposed)]
        enc = tok(texts, return_tensors="pt", padding=True)
    kw = dict(max_new_tokens=max_new, pad_token_id=tok.pad_token_id, eos_token_id=2)
    if temperature is None:
        kw.update(do_sample=False)
    else:
        kw.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0, num_return_sequences=n)
    with torch.no_grad():
        out = model.generate(**enc, **kw)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    k = 1 if temperature is None else n
    return [texts[i * k:(i + 1) * k] for i in range(len(problems))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/srpo/models/smollm2-135m-instruct"))
    ap.add_argument("--variants", default=",".join(wp.VARIANTS))
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="problems per generate call")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--style", default="shots", choices=["tagged", "shots", "shots-long"])
    ap.add_argument("--role", default="solver", choices=["solver", "verifier"], help="verifier: half the proposed answers right, half off by 1..3")
    ap.add_argument("--out", default=None, help="JSON lines of every answer")
    ap.add_argument("--show", type=int, default=2, help="sample texts printed per variant")
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tok, model = load(a.model)
    out = open(a.out, "w") if a.out else None
    rows = []
    for name in a.variants.split(","):
        s = wp.VARIANTS[name]
        r = random.Random(f"{name}:{a.seed}")
        problems = [wp.generate(r, s) for _ in range(a.problems)]
        t0 = time.time()
        greedy_ok = sampled_ok = nondegenerate = 0
        lengths = []
        for i in range(0, len(problems), a.batch):
            chunk = problems[i:i + a.batch]
            prop = None
            if a.role == "verifier":
                prop = [p.answer if r.random() < 0.5 else max(0, p.answer + r.choice([-3, -2, -1, 1, 2, 3])) for p in chunk]
            g = generate(tok, model, chunk, 1, None, a.max_new, a.style, prop)
            smp = generate(tok, model, chunk, a.group, a.temperature, a.max_new, a.style, prop)
            for j, (p, gt, st) in enumerate(zip(chunk, g, smp)):
                if prop is None:
                    gr = wp.parse_answer(gt[0]) == p.answer
                    rw = [wp.parse_answer(x) == p.answer for x in st]
                else:
                    truth = prop[j] == p.answer
                    gr = wp.parse_verdict(gt[0]) == truth
                    rw = [wp.parse_verdict(x) == truth for x in st]
                greedy_ok += gr
                sampled_ok += sum(rw)
                nondegenerate += 0 < sum(rw) < len(rw)
                lengths += [len(tok(x)["input_ids"]) for x in st]
                if out:
                    out.write(json.dumps({"variant": name, "problem": p.text, "answer": p.answer, "greedy": gt[0], "samples": st, "rewards": rw}) + "\n")
                    out.flush()
        if a.show:
            print(f"--- {name}: {chunk[0].text} (answer {chunk[0].answer})\n greedy: {g[0][0]!r}\n sample: {smp[0][0]!r}", flush=True)
        n = len(problems)
        row = {
            "variant": name,
            "style": a.style,
            "role": a.role,
            "temperature": a.temperature,
            "problems": n,
            "greedy": greedy_ok / n,
            "greedy_ci": wilson(greedy_ok, n),
            "sampled": sampled_ok / (n * a.group),
            "sampled_ci": wilson(sampled_ok, n * a.group),
            "nondegenerate": nondegenerate / n,
            "mean_tokens": sum(lengths) / max(1, len(lengths)),
            "seconds": time.time() - t0,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{a.role}, style {a.style}\n| variant | greedy | sampled (T={a.temperature}) | non-degenerate groups of {a.group} | mean tokens |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for w in rows:
        print(
            f"| {w['variant']} | {w['greedy']:.0%} [{w['greedy_ci'][0]:.0%}, {w['greedy_ci'][1]:.0%}] "
            f"| {w['sampled']:.1%} [{w['sampled_ci'][0]:.1%}, {w['sampled_ci'][1]:.1%}] | {w['nondegenerate']:.0%} | {w['mean_tokens']:.0f} |"
        )


if __name__ == "__main__":
    main()
