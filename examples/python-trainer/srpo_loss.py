"""The learner's SRPO loss in PyTorch, operation for operation.

Mirrors, in float32:
- ``trainingSetsFromGroup`` (libs/trainer/src/training-sets.ts): each member's AgentOutput
  bytes decoded (and opened with its content key when sealed, srpo_seal.py), so logpOld is
  exactly what the agent recorded;
- ``packPairs`` / ``packedLogProbs`` (libs/policy/src/log-probs.ts): context left-truncated to
  ``max_position_embeddings + 1 - R``, response kept whole, rows right-padded with token 0, one
  forward pass, ``log_softmax(logits / temperature)`` at each response token;
- ``srpoObjective`` (libs/srpo/src/objective.ts, set-ratio.ts, surrogate.ts): masked token
  log-ratios bounded at +-1e6, ``L_s = c(K_s) * sum``, the surrogate evaluated at
  ``exp(min(L_s, bound(A_s)))`` with the dual clip, ``loss = -mean over sets``;
- ``readDiagnostics`` (libs/srpo/src/diagnostics.ts) for the headline diagnostics;
- ``hashWeightValues`` (libs/policy/src/checkpoint-store.ts): the learner's weights hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from typing import Any, Callable, Dict, List, Optional

import torch

from srpo_seal import OPTION as CONTENT_KEYS_OPTION, SealOpenError, open_output

TOKEN_LOG_RATIO_LIMIT = 1e6
MAX_LOG_RATIO = math.log(3.4028234663852886e38) / 2  # log(float32 max) / 2 ~ 44.36
CLIP_BOUND_MARGIN = 1.0


class InvalidInput(ValueError):
    """A set the learner's trainer would refuse (recorded as skipped, `invalid-input`)."""


def training_sets(codec: Any, group: Dict[str, Any], keys: Optional[Dict[str, bytes]] = None) -> List[Dict[str, Any]]:
    """The trainer's view of a group: one entry per set, members from their original AgentOutput bytes.

    A sealed member is opened with ``keys[keyId]`` (the batch's content keys, docs/erasure.md).
    ``keys`` None (no ``--content-keys``) refuses it; a key missing from ``keys`` (erased: take
    those sets out first, srpo_groups.group_without) or one that does not open it raises InvalidInput.
    """
    sets = []
    for gs in group["sets"]:
        members = []
        for m in gs["set"]["members"]:
            o = codec.decode_as("AgentOutput", m["output"])
            if o["outputId"] != m["outputId"]:
                raise InvalidInput(f"member {m['outputId']} carries the bytes of output {o['outputId']}")
            if o.get("sealed") is not None:
                if keys is None:
                    raise InvalidInput(f"member {m['outputId']} is sealed (key {o['sealed']['keyId']}); pass {CONTENT_KEYS_OPTION} "
                                       "with the learner's store (SQLite path or postgres:// URL) to open it")
                try:
                    o = open_output(o, keys.get(o["sealed"]["keyId"]))
                except SealOpenError as e:
                    raise InvalidInput(f"set {gs['set']['setId']}: {e}") from None
            members.append({
                "outputId": m["outputId"],
                "context": list(o["contextTokenIds"]),
                "response": list(o["responseTokenIds"]),
                "logpOld": list(o["behaviourLogProbs"]),
                "mask": [1.0 if b else 0.0 for b in o["lossMask"]],
                "temperature": float(m["temperature"]),
            })
        sets.append({"setId": gs["set"]["setId"], "advantage": float(gs["advantage"]), "members": members})
    return sets


def check_sets(sets: List[Dict[str, Any]], max_seq_len: int, vocab: int) -> None:
    """The checks of packPairs and buildPaddedSetBatch that the loss relies on."""
    for s in sets:
        if not math.isfinite(s["advantage"]):
            raise InvalidInput(f"set {s['setId']}: advantage {s['advantage']} is not finite")
        for m in s["members"]:
            where = f"set {s['setId']} member {m['outputId']}"
            r = len(m["response"])
            if not m["context"] or r < 1 or r > max_seq_len:
                raise InvalidInput(f"{where}: needs >= 1 context token and 1..{max_seq_len} response tokens")
            if len(m["logpOld"]) != r or len(m["mask"]) != r:
                raise InvalidInput(f"{where}: one log-prob and one mask flag per response token")
            if any(t < 0 or t >= vocab for t in m["context"] + m["response"]):
                raise InvalidInput(f"{where}: token id out of range (vocab_size {vocab})")
            if any(not math.isfinite(x) or x > 0 for x in m["logpOld"]) or not any(m["mask"]):
                raise InvalidInput(f"{where}: log-probs must be finite and <= 0, and one token trained")


def pack(sets: List[Dict[str, Any]], max_seq_len: int, device: str = "cpu") -> Dict[str, torch.Tensor]:
    members = [m for s in sets for m in s["members"]]
    kept = [min(len(m["context"]), max_seq_len + 1 - len(m["response"])) for m in members]
    t_in = max([1] + [c + len(m["response"]) - 1 for c, m in zip(kept, members)])
    t_r = max(len(m["response"]) for m in members)
    n = len(members)
    inputs = torch.zeros(n, t_in, dtype=torch.long)
    positions = torch.zeros(n, t_r, dtype=torch.long)
    targets = torch.zeros(n, t_r, dtype=torch.long)
    logp_old = torch.zeros(n, t_r, dtype=torch.float32)
    mask = torch.zeros(n, t_r, dtype=torch.float32)
    for i, (c, m) in enumerate(zip(kept, members)):
        seq = m["context"][len(m["context"]) - c:] + m["response"]
        inputs[i, : len(seq) - 1] = torch.tensor(seq[:-1])
        r = len(m["response"])
        positions[i, :r] = torch.arange(c - 1, c - 1 + r)  # response token j is predicted at input position c + j - 1
        targets[i, :r] = torch.tensor(m["response"])
        logp_old[i, :r] = torch.tensor(m["logpOld"], dtype=torch.float32)
        mask[i, :r] = torch.tensor(m["mask"], dtype=torch.float32)
    member_set = torch.tensor([i for i, s in enumerate(sets) for _ in s["members"]], dtype=torch.long)
    advantage = torch.tensor([s["advantage"] for s in sets], dtype=torch.float32)
    lengths = torch.tensor([c + len(m["response"]) - 1 for c, m in zip(kept, members)], dtype=torch.long)
    out = {"inputs": inputs, "positions": positions, "targets": targets, "logp_old": logp_old, "mask": mask,
           "member_set": member_set, "advantage": advantage, "lengths": lengths}
    return {k: v.to(device) for k, v in out.items()}


def token_log_probs(model: Any, b: Dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
    """[M, R] log pi_temperature(response token), 0 at masked and padded positions."""
    logits = model(input_ids=b["inputs"]).logits.float()
    if temperature != 1:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    rows = torch.arange(logp.shape[0], device=logp.device).unsqueeze(1)
    return logp[rows, b["positions"], b["targets"]] * b["mask"]


def set_log_ratios(logp_new: torch.Tensor, b: Dict[str, torch.Tensor], cfg: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """Masked token log-ratios bounded at +-1e6, and per set ``L_s = c(K_s) * sum``: ``{log_rho, k, tokens}``."""
    mask, adv = b["mask"], b["advantage"]
    s = adv.shape[0]
    tokens = torch.where(mask > 0, (logp_new - b["logp_old"]).clamp(-TOKEN_LOG_RATIO_LIMIT, TOKEN_LOG_RATIO_LIMIT), torch.zeros_like(logp_new))
    member = tokens.sum(1)
    summed = torch.zeros(s, device=member.device).index_add(0, b["member_set"], member)
    k = torch.zeros(s, device=member.device).index_add(0, b["member_set"], torch.ones_like(member))
    c = {"sqrt": torch.rsqrt(k), "sum": torch.ones_like(k), "mean": torch.reciprocal(k)}[cfg["eventReduction"]]
    return {"log_rho": c * summed, "k": k, "tokens": tokens}


def set_surrogates(log_rho: torch.Tensor, adv: torch.Tensor, cfg: Dict[str, Any]) -> torch.Tensor:
    """Each set's surrogate, evaluated at ``exp(min(L_s, bound(A_s)))``, with the dual clip."""
    dual = cfg["clipRatioC"] if cfg["dualClip"] else None
    high = min(math.log1p(cfg["clipHigh"]) + CLIP_BOUND_MARGIN, MAX_LOG_RATIO)
    low_bound = MAX_LOG_RATIO if dual is None else min(math.log(dual) + CLIP_BOUND_MARGIN, MAX_LOG_RATIO)
    bound = torch.where(adv > 0, torch.full_like(adv, high), torch.full_like(adv, low_bound))
    r = torch.exp(torch.minimum(log_rho, bound))
    surrogate = torch.minimum(r * adv, r.clamp(1 - cfg["clipLow"], 1 + cfg["clipHigh"]) * adv)
    if dual is not None:
        surrogate = torch.where(adv < 0, torch.maximum(surrogate, adv * dual), surrogate)
    return surrogate


def srpo_objective(logp_new: torch.Tensor, b: Dict[str, torch.Tensor], cfg: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    out = set_log_ratios(logp_new, b, cfg)
    surrogate = set_surrogates(out["log_rho"], b["advantage"], cfg)
    return {"loss": -surrogate.mean(), "surrogate": surrogate, **out}


def micro_batch_rows(lengths: List[int], max_tokens: int) -> List[List[int]]:
    """The learner's split (libs/policy/src/micro-batch.ts): consecutive rows, rows x longest <= max_tokens."""
    chunks: List[List[int]] = []
    current: List[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if current and max(longest, n) * (len(current) + 1) > max_tokens:
            chunks.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    return chunks + [current] if current else chunks


def objective_and_backward(model: Any, b: Dict[str, torch.Tensor], cfg: Dict[str, Any], temperature: float, micro_batch_tokens: int = 0,
                           loss_scale: Optional[float] = None, no_sync: Optional[Callable[[], Any]] = None,
                           before_sync: Optional[Callable[[], None]] = None):
    """The objective on the whole mini-batch and its gradient in the parameters' .grad; ``(output, micro-batches)``.

    Above ``micro_batch_tokens`` padded positions, as the learner's SRPO_MICRO_BATCH_TOKENS: every
    micro-batch forwarded without a graph, the objective and G = dloss/dlogp on the whole mini-batch
    (each set ratio sees all its members), then each micro-batch forwarded again and backpropagated
    with G (activation recomputation). Rows are split, never the objective.

    For one rank's shard of a distributed step (srpo_dist.py): ``loss_scale`` backpropagates
    ``-loss_scale * sum of the shard's surrogates`` instead of the shard's mean (``world / S``, S the
    sets of the whole mini-batch, so the ranks' averaged gradient is the mean over all S sets);
    ``no_sync`` (DDP's) wraps every backward but the last, and ``before_sync`` runs just before that
    last one, the backward whose gradients DDP all-reduces. ``model`` is then the DDP module; the
    forwards without a graph go to ``model.module``.
    """
    plain = getattr(model, "module", model) if no_sync is not None else model
    m, t = b["inputs"].shape

    def loss_of(out: Dict[str, torch.Tensor]) -> torch.Tensor:
        return out["loss"] if loss_scale is None else -(out["surrogate"].sum() * loss_scale)

    if micro_batch_tokens <= 0 or m * t <= micro_batch_tokens:
        out = srpo_objective(token_log_probs(model, b, temperature), b, cfg)
        if before_sync is not None:
            before_sync()
        loss_of(out).backward()
        return out, 1
    chunks = micro_batch_rows(b["lengths"].tolist(), micro_batch_tokens)

    def rows(idx: List[int]) -> Dict[str, torch.Tensor]:
        sel = torch.tensor(idx, device=b["inputs"].device)
        width = max(1, int(b["lengths"][sel].max()))
        return {"inputs": b["inputs"][sel, :width], "positions": b["positions"][sel], "targets": b["targets"][sel], "mask": b["mask"][sel]}

    with torch.no_grad():
        logp = torch.cat([token_log_probs(plain, rows(c), temperature) for c in chunks])
    logp.requires_grad_(True)
    out = srpo_objective(logp, b, cfg)
    loss_of(out).backward()
    g = logp.grad
    for i, c in enumerate(chunks):
        last = i == len(chunks) - 1
        if last and before_sync is not None:
            before_sync()
        with (no_sync() if no_sync is not None and not last else contextlib.nullcontext()):
            token_log_probs(model, rows(c), temperature).backward(g[torch.tensor(c, device=g.device)])
    return out, len(chunks)


def diagnostics(out: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor], cfg: Dict[str, Any]) -> Dict[str, float]:
    with torch.no_grad():
        adv, mask = b["advantage"], b["mask"]
        ratio = torch.exp(out["log_rho"].clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
        delta = -out["tokens"]
        kl = ((torch.exp(delta.clamp(max=MAX_LOG_RATIO)) - 1 - delta) * mask).sum() / mask.sum()
        dual = (ratio > cfg["clipRatioC"]) & (adv < 0) if cfg["dualClip"] else torch.zeros_like(adv, dtype=torch.bool)
        return {
            "losses/loss": float(out["loss"].detach()),
            "losses/clip_frac_low": float(((ratio < 1 - cfg["clipLow"]) & (adv < 0)).double().mean()),
            "losses/clip_frac_high": float(((ratio > 1 + cfg["clipHigh"]) & (adv > 0)).double().mean()),
            "losses/clip_frac_dual": float(dual.double().mean()),
            "ratio/mean": float(ratio.double().mean()),
            "ratio/min": float(ratio.min()),
            "ratio/max": float(ratio.max()),
            "ratio/out_of_range": float((~(out["log_rho"].abs() <= MAX_LOG_RATIO)).sum()),
            "kl/approx_k3": float(kl),
            "batch/sets": float(adv.shape[0]),
            "batch/members": float(mask.shape[0]),
            "batch/tokens": float(mask.sum()),
        }


def weights_hash(model: Any) -> str:
    """SHA-256 over the float32 weights by sorted HF name, as the learner hashes them (tied weights once)."""
    h = hashlib.sha256()
    params = dict(model.named_parameters())  # a tied lm_head is reported once, under model.embed_tokens.weight
    for name in sorted(params):
        data = params[name].detach().to(torch.float32).contiguous().cpu().numpy().astype("<f4").tobytes()
        shape = ",".join(str(d) for d in params[name].shape)
        h.update(f"{name}\nfloat32\n{shape}\n{len(data)}\n".encode("utf-8"))
        h.update(data)
    return h.hexdigest()
