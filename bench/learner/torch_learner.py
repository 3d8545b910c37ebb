"""PyTorch twin of the @srpo/policy learner step, for bench/learner (CPU, or CUDA with job.device).

Reads the batch and the initial weights that run.ts wrote (the weights as an
@srpo/policy checkpoint: model.json + weights.bin), builds the same model
(pre-norm causal transformer, learned positions, tanh-GELU MLP, tied head),
runs the same SRPO step (objective of @srpo/srpo, Adam, global-norm clipping)
and prints one JSON line with its timings and first-step loss.

The model is written the way a PyTorch user would write it (nn.Linear,
F.layer_norm, F.scaled_dot_product_attention, torch.optim.Adam defaults),
so the comparison is against idiomatic eager PyTorch, not a handicapped port.

Usage: python3 torch_learner.py --job job.json [--profile-ops]   (see run.ts)

With --profile-ops the timed steps run under torch.profiler and the result carries the
ops with the most self CPU time per step, for the side-by-side table of run.ts.
"""
import argparse
import json
import math
import os
import struct
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True)
    ap.add_argument("--profile-ops", action="store_true")
    args = ap.parse_args()
    with open(args.job) as f:
        job = json.load(f)
    threads = int(job["threads"])
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    # run.ts --torch-device cuda: the same step on the GPU, for context next to tfjs's WebGPU side.
    device = torch.device(job.get("device", "cpu"))

    ckpt = job["checkpoint"]
    with open(os.path.join(ckpt, "model.json")) as f:
        model_json = json.load(f)
    with open(os.path.join(ckpt, "weights.bin"), "rb") as f:
        raw = f.read()
    cfg = model_json["modelTopology"]["config"]
    weights = {}
    off = 0
    for spec in model_json["weightsManifest"][0]["weights"]:
        n = 1
        for d in spec["shape"]:
            n *= d
        t = torch.frombuffer(bytearray(raw[off : off + 4 * n]), dtype=torch.float32).reshape(spec["shape"])
        off += 4 * n
        if not spec["name"].startswith("optimizer/"):
            weights[spec["name"]] = t.clone()

    V, D, L, H, TMAX = cfg["vocabSize"], cfg["dModel"], cfg["nLayers"], cfg["nHeads"], cfg["maxSeqLen"]
    eps = cfg["layerNormEps"]
    tied = cfg["tiedEmbeddings"]

    class Block(torch.nn.Module):
        def __init__(self, i: int):
            super().__init__()
            p = f"blocks.{i}."
            self.ln1 = torch.nn.LayerNorm(D, eps=eps)
            self.ln2 = torch.nn.LayerNorm(D, eps=eps)
            self.qkv = torch.nn.Linear(D, 3 * D)
            self.proj = torch.nn.Linear(D, D)
            self.fc1 = torch.nn.Linear(D, cfg["dMlp"])
            self.fc2 = torch.nn.Linear(cfg["dMlp"], D)
            with torch.no_grad():
                self.ln1.weight.copy_(weights[p + "ln1.g"]); self.ln1.bias.copy_(weights[p + "ln1.b"])
                self.ln2.weight.copy_(weights[p + "ln2.g"]); self.ln2.bias.copy_(weights[p + "ln2.b"])
                # tfjs stores [in, out]; nn.Linear wants [out, in].
                self.qkv.weight.copy_(weights[p + "attn.wqkv"].T); self.qkv.bias.copy_(weights[p + "attn.bqkv"])
                self.proj.weight.copy_(weights[p + "attn.wo"].T); self.proj.bias.copy_(weights[p + "attn.bo"])
                self.fc1.weight.copy_(weights[p + "mlp.w1"].T); self.fc1.bias.copy_(weights[p + "mlp.b1"])
                self.fc2.weight.copy_(weights[p + "mlp.w2"].T); self.fc2.bias.copy_(weights[p + "mlp.b2"])

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(o.transpose(1, 2).reshape(B, T, D))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = torch.nn.Parameter(weights["tok_emb"].clone())
            self.pos = torch.nn.Parameter(weights["pos_emb"].clone())
            self.blocks = torch.nn.ModuleList([Block(i) for i in range(L)])
            self.ln_f = torch.nn.LayerNorm(D, eps=eps)
            with torch.no_grad():
                self.ln_f.weight.copy_(weights["ln_f.g"]); self.ln_f.bias.copy_(weights["ln_f.b"])
            self.head = None if tied else torch.nn.Parameter(weights["head"].clone())

        def forward(self, idx):
            B, T = idx.shape
            x = F.embedding(idx, self.tok) + self.pos[:T]
            for b in self.blocks:
                x = b(x)
            x = self.ln_f(x)
            return x @ self.tok.T if self.head is None else x @ self.head

    # ---- batch layout: identical rule to @srpo/policy packPairs (context left-truncated, response whole).
    members = []
    set_of = []
    advantages = []
    for e, s in enumerate(job["sets"]):
        advantages.append(s["advantage"])
        for m in s["members"]:
            members.append(m)
            set_of.append(e)
    M = len(members)
    rows = []
    for m in members:
        r = len(m["responseTokens"])
        c = min(len(m["contextTokens"]), TMAX + 1 - r)
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
        for j, tok in enumerate(resp):
            targets[i, c + j - 1] = tok
            gather[i, j] = c + j - 1
            mask[i, j] = (members[i].get("mask") or [1] * len(resp))[j]
            logp_old[i, j] = members[i]["logpOld"][j]
    member_set = torch.tensor(set_of)
    adv = torch.tensor(advantages, dtype=torch.float32)
    S = len(advantages)
    obj = job["objective"]
    red = reduction_factor(member_set, S, obj["eventReduction"])
    inputs, targets, gather, mask, logp_old, member_set, adv, red = (
        t.to(device) for t in (inputs, targets, gather, mask, logp_old, member_set, adv, red)
    )
    clip_low, clip_high = obj["clipLow"], obj["clipHigh"]
    if obj["objective"] != "srpo":
        sys.exit("torch_learner.py implements the srpo objective only")

    model = Model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=job["lr"], betas=(0.9, 0.999), eps=1e-8)

    def step():
        logits = model(inputs)  # [M, Tin, V]
        logp_all = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        logp_new = logp_all.gather(1, gather) * mask
        loss, rho = srpo_set_loss(logp_new, logp_old, mask, member_set, adv, red, clip_low, clip_high)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), job["maxGradNorm"])
        opt.step()
        # One host read per step, like the tfjs learner's diagnostics read.
        return loss.item(), gn.item(), (rho.min().item(), rho.max().item())

    first_loss, first_gn, _ = step()
    for _ in range(job["warmup"] - 1):
        step()
    op_profile = None
    if args.profile_ops:
        from torch.profiler import ProfilerActivity, profile

        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(job["steps"]):
                step()
        dt = time.perf_counter() - t0
        rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        op_profile = [
            {"op": e.key, "callsPerStep": e.count / job["steps"], "msPerStep": e.self_cpu_time_total / 1000 / job["steps"]}
            for e in rows[:20]
        ]
    else:
        t0 = time.perf_counter()
        for _ in range(job["steps"]):
            step()
        dt = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "side": f"pytorch-{device.type}",
                "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "steps": job["steps"],
                "seconds": dt,
                "msPerStep": 1000 * dt / job["steps"],
                "tokensPerStep": tokens_per_step,
                "tokensPerSecond": tokens_per_step * job["steps"] / dt,
                "firstLoss": first_loss,
                "firstGradNorm": first_gn,
                "kernels": kernels_in_use(torch),
                "opProfile": op_profile,
            }
        )
    )


def reduction_factor(member_set, num_sets: int, reduction: str):
    """[S] c(K_e): 1/sqrt(K), 1 or 1/K, K counted from member_set."""
    import torch

    set_size = torch.zeros(num_sets).index_add_(0, member_set, torch.ones(member_set.shape[0]))
    return {"sqrt": set_size.rsqrt(), "sum": torch.ones(num_sets), "mean": 1.0 / set_size}[reduction]


def srpo_set_loss(logp_new, logp_old, mask, member_set, adv, red, clip_low: float, clip_high: float):
    """(loss, rho): @srpo/srpo's srpo objective as the unbounded formula, one ratio and one clip per set.

    The reference's value and gradient wherever the inputs are finite, every |log rho| <= 44.36 and no
    dual clip is active (this twin has none): examples/python-trainer/test_srpo_reference.py checks it
    against libs/srpo's reference cases on those.
    """
    import torch

    tok = torch.where(mask > 0, logp_new - logp_old, torch.zeros_like(logp_new))
    member = tok.sum(1)
    set_lr = red * torch.zeros(adv.shape[0], device=adv.device).index_add(0, member_set, member)
    rho = set_lr.exp()
    surr = torch.minimum(rho * adv, rho.clamp(1 - clip_low, 1 + clip_high) * adv)
    return -surr.mean(), rho


def kernels_in_use(torch) -> str:
    """What decides PyTorch's CPU arithmetic here: ATen's vector dispatch, the BLAS, oneDNN, threads."""
    cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "unknown"
    blas = "MKL" if torch.backends.mkl.is_available() else "no MKL"
    capped = [f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA") if k in os.environ]
    return (
        f"ATen {cap}; {blas} for mm/addmm; oneDNN {'available' if torch.backends.mkldnn.is_available() else 'absent'}; "
        f"{torch.get_num_threads()} threads" + (f" (capped: {', '.join(capped)})" if capped else "")
    )


if __name__ == "__main__":
    main()
