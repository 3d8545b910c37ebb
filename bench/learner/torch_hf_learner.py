"""PyTorch + transformers side of bench/learner/hf (the HF-architecture learner benchmark).

Two modes, both driven by bench/learner/hf/run.ts:

  python3 torch_hf_learner.py --make-model DIR [--seed N]
      DIR/config.json (written by run.ts) names a Llama-family architecture (Qwen2 by
      default). Builds that model with transformers' own initialisation, seeded, then
      perturbs the parameters transformers initialises to constants (biases 0, RMSNorm
      gains 1) so that every term of the forward is exercised by the loss comparison, and
      writes it back with save_pretrained (safetensors, float32). No tokenizer: the
      benchmark feeds token ids.

  python3 torch_hf_learner.py --job job.json --attn eager|sdpa
      Loads DIR with AutoModelForCausalLM.from_pretrained(dtype=float32,
      attn_implementation=...) (and, when the job names a "loraDir", that peft adapter on it with
      PeftModel.from_pretrained(is_trainable=True): only the adapter trains), runs the same SRPO step as @srpo/policy's SrpoTrainer
      (objective of @srpo/srpo with its defaults: srpo, event reduction sqrt, clip 0.2/0.2,
      dual clip c = 3; torch.optim.Adam; global-norm clipping) on the batch run.ts wrote, and
      prints one JSON line: timings, first- and last-step loss, memory.

The step is written the way a PyTorch user would write it: the transformers model as
loaded, model(input_ids, logits_to_keep=...).logits from the first response position on
(as TRL's GRPO trainer asks for them; --all-positions projects every position),
log_softmax + gather, torch.optim.Adam defaults, clip_grad_norm_. Nothing is compiled (eager PyTorch, like tfjs's eager execution).

Memory: `peakRssBytes` is the process's resident-set high-water mark from
resource.getrusage(RUSAGE_SELF).ru_maxrss (Linux reports KiB), over the whole process
(imports, loading, every step); `rssAfterLoadBytes` is VmRSS from /proc/self/status after
the model and batch are built, before the first step. The tfjs side reports the same two
figures for its process, measured the same way.
"""
import argparse
import json
import os
import resource
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_model(out_dir: str, seed: int) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = AutoConfig.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            elif name.endswith("norm.weight"):
                p.copy_(1 + torch.randn(p.shape, generator=gen) * 0.1)
    model.save_pretrained(out_dir, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"dir": out_dir, "parameters": n, "torch": torch.__version__}))


def cpu_capability(torch) -> str:
    try:
        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # older torch
        return "unknown"


def run_job(job_file: str, attn: str, profile_ops: int, profile_shapes: bool = False, all_positions: bool = False) -> None:
    with open(job_file) as f:
        job = json.load(f)
    threads = int(job["threads"])
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    model = AutoModelForCausalLM.from_pretrained(job["modelDir"], dtype=torch.float32, attn_implementation=attn)
    cfg = model.config
    lora = job.get("loraDir")
    if lora:
        # A LoRA update (bench/learner/hf/smollm2.ts): the adapter the tfjs side starts from, as
        # peft loads any saved adapter; only its factors train, the base stays frozen.
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, lora, is_trainable=True)
    model.train()  # dropout is 0 in these configs; train mode as a learner runs it
    params = [p for p in model.parameters() if p.requires_grad]
    vocab = cfg.vocab_size
    tmax = cfg.max_position_embeddings

    # ---- batch layout: the rule of @srpo/policy packPairs (context left-truncated, response whole,
    # rows right-padded with token 0; causal attention keeps padding away from real positions).
    members, set_of, advantages = [], [], []
    for e, s in enumerate(job["sets"]):
        advantages.append(s["advantage"])
        for m in s["members"]:
            members.append(m)
            set_of.append(e)
    M = len(members)
    rows = []
    for m in members:
        r = len(m["responseTokens"])
        c = min(len(m["contextTokens"]), tmax + 1 - r)
        rows.append((m["contextTokens"][len(m["contextTokens"]) - c :], m["responseTokens"], c))
    tin = max(c + len(resp) - 1 for _, resp, c in rows)
    tr = max(len(resp) for _, resp, _ in rows)
    inputs = torch.zeros(M, tin, dtype=torch.long)
    targets = torch.zeros(M, tin, dtype=torch.long)
    gather = torch.zeros(M, tr, dtype=torch.long)
    mask = torch.zeros(M, tr)
    logp_old = torch.zeros(M, tr)
    tokens_per_step = 0
    for i, (ctx, resp, c) in enumerate(rows):
        seq = ctx + resp
        inputs[i, : len(seq) - 1] = torch.tensor(seq[:-1])
        tokens_per_step += len(seq) - 1
        mk = members[i].get("mask") or [1] * len(resp)
        for j, tok in enumerate(resp):
            targets[i, c + j - 1] = tok
            gather[i, j] = c + j - 1
            mask[i, j] = mk[j]
            logp_old[i, j] = members[i]["logpOld"][j]
    member_set = torch.tensor(set_of)
    adv = torch.tensor(advantages, dtype=torch.float32)
    S = len(advantages)
    obj = job["objective"]
    if obj["objective"] != "srpo":
        sys.exit("torch_hf_learner.py implements the srpo objective only")
    red = reduction_factor(member_set, S, obj["eventReduction"])
    clip_low, clip_high = obj["clipLow"], obj["clipHigh"]
    dual_c = obj["clipRatioC"] if obj.get("dualClip") else None

    opt = torch.optim.Adam(params, lr=job["lr"], betas=(0.9, 0.999), eps=1e-8)
    max_norm = job["maxGradNorm"]

    # Logits only from the first position that predicts a response token on, as TRL's trainers
    # ask for them (logits_to_keep): the output projection over a 32k vocabulary is the largest
    # product of the step, and the learner too projects only response positions.
    first = 0 if all_positions else min(c for _, _, c in rows) - 1
    keep = tin - first
    targets_kept = targets[:, first:]
    gather_kept = gather - first

    def step():
        logits = model(input_ids=inputs, use_cache=False, logits_to_keep=keep).logits  # [M, keep, V] float32
        logp_all = torch.log_softmax(logits, dim=-1).gather(-1, targets_kept.unsqueeze(-1)).squeeze(-1)
        logp_new = logp_all.gather(1, gather_kept)
        loss, _ = srpo_set_loss(logp_new, logp_old, mask, member_set, adv, red, clip_low, clip_high, dual_c)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, max_norm) if max_norm > 0 else torch.tensor(0.0)
        opt.step()
        # One host read per step, like the tfjs learner's diagnostics read.
        return loss.item(), gn.item()

    rss_load = rss_bytes()
    t_first = time.perf_counter()
    first_loss, first_gn = step()
    first_ms = 1000 * (time.perf_counter() - t_first)
    for _ in range(job["warmup"] - 1):
        step()
    t0 = time.perf_counter()
    last_loss, last_gn = first_loss, first_gn
    for _ in range(job["steps"]):
        last_loss, last_gn = step()
    dt = time.perf_counter() - t0
    ops = None
    if profile_ops > 0:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=profile_shapes) as prof:
            step()
        ops = [
            {"name": f"{e.key} {e.input_shapes}" if profile_shapes else e.key, "ms": e.self_cpu_time_total / 1000.0, "count": e.count}
            for e in sorted(prof.key_averages(group_by_input_shape=profile_shapes), key=lambda e: -e.self_cpu_time_total)[:profile_ops]
        ]
    result = {
        "side": f"pytorch-{attn}",
        "device": f"cpu, torch {torch.__version__}, transformers {transformers.__version__}",
        "kernels": f"attn_implementation={model.config._attn_implementation}, cpu capability {cpu_capability(torch)}, "
        f"mkldnn {'on' if torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled else 'off'}",
        "threads": torch.get_num_threads(),
        "interopThreads": torch.get_num_interop_threads(),
        "parameters": sum(p.numel() for p in params),
        "lora": bool(lora),
        "steps": job["steps"],
        "seconds": dt,
        "msPerStep": 1000 * dt / job["steps"],
        "firstStepMs": first_ms,
        "tokensPerStep": tokens_per_step,
        "tokensPerSecond": tokens_per_step * job["steps"] / dt,
        "firstLoss": first_loss,
        "firstGradNorm": first_gn,
        "lastLoss": last_loss,
        "lastGradNorm": last_gn,
        "rssAfterLoadBytes": rss_load,
        "peakRssBytes": peak_rss_bytes(),
    }
    if ops is not None:
        result["opProfile"] = ops
    print(json.dumps(result))


def reduction_factor(member_set, num_sets: int, reduction: str):
    """[S] c(K_e): 1/sqrt(K), 1 or 1/K, K counted from member_set."""
    import torch

    set_size = torch.zeros(num_sets).index_add_(0, member_set, torch.ones(member_set.shape[0]))
    return {"sqrt": set_size.rsqrt(), "sum": torch.ones(num_sets), "mean": 1.0 / set_size}[reduction]


def srpo_set_loss(logp_new, logp_old, mask, member_set, adv, red, clip_low: float, clip_high: float, dual_c):
    """(loss, rho): @srpo/srpo's srpo objective as the unbounded formula, with the dual clip c (or None).

    The reference's value and gradient wherever the inputs are finite and every |log rho| <= 44.36:
    examples/python-trainer/test_srpo_reference.py checks it against libs/srpo's reference cases on those.
    """
    import torch

    tok = torch.where(mask > 0, logp_new - logp_old, torch.zeros_like(logp_new))
    set_lr = red * torch.zeros(adv.shape[0]).index_add(0, member_set, tok.sum(1))
    rho = set_lr.exp()
    surr = torch.minimum(rho * adv, rho.clamp(1 - clip_low, 1 + clip_high) * adv)
    if dual_c is not None:
        surr = torch.where(adv < 0, torch.maximum(surr, dual_c * adv), surr)
    return -surr.mean(), rho


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-model", metavar="DIR")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--profile-ops", type=int, default=0, help="profile one extra step; report the top N ops by self CPU time")
    ap.add_argument("--profile-shapes", action="store_true", help="group the op profile by input shapes too")
    ap.add_argument("--all-positions", action="store_true", help="project every position to logits (transformers' default), not only from the first response position on")
    args = ap.parse_args()
    if args.make_model:
        make_model(args.make_model, args.seed)
    elif args.job:
        run_job(args.job, args.attn, args.profile_ops, args.profile_shapes, args.all_positions)
    else:
        ap.error("one of --make-model or --job is required")


if __name__ == "__main__":
    main()
