"""The trainer on torch.distributed: one mini-batch's sets split over the ranks, DDP's gradient average.

Launched by ``torchrun --nproc_per_node W srpo_trainer.py ... --backend gloo`` (CPU) or
``--backend nccl`` (one GPU per rank). The design (docs/python-trainer.md, "Several processes"):

- **Rank 0 is the only one that touches Kafka and the records.** It consumes, forms the learner's
  mini-batches, triages them (opening sealed members with the content keys), and broadcasts the
  sets it trains on (decoded token ids, log-probs, masks, advantages) with the temperature. The
  other ranks never read the topic, never commit, never write a record, a checkpoint or an event:
  the log's mini-batch boundaries and the exactly-once records stay one process's business.
- **The sets are split, never a set.** Rank r takes sets r, r + W, r + 2W, ... of the mini-batch
  (``shard``): deterministic, at most one set of difference between ranks, a set's members always
  on one rank so its ratio is one rank's sum.
- **The mean over all S sets.** The loss is ``-(1/S) sum_s surr_s``. Each rank backpropagates
  ``-(W/S) sum over its sets``; DDP averages the gradients over the W ranks, which gives
  ``-(1/S) sum over every set``: the single process's gradient, whatever the split (uneven, or a
  rank without a set). W/S is a power-of-two multiple of 1/S for W = 2, so the per-set seed is the
  single process's to the bit; what differs is the order float32 sums run in.
- **One all-reduce per step on every rank.** Micro-batches: every backward but a rank's last runs
  under ``no_sync``, so each rank makes exactly one synchronized backward, however many
  micro-batches its shard has; a rank with no set makes it on a one-token input times 0. Buffers
  are not broadcast (``broadcast_buffers=False``): a forward is then no collective, and the ranks
  may forward different numbers of micro-batches.
- **The same weights everywhere.** Every rank starts from the same directory (the base, or the
  checkpoint rank 0's records resume from: the checkpoint directory must be visible to every rank),
  checked by the weights hash; after the all-reduce every rank holds the same gradient bits, so the
  clip and the Adam step are the same and the weights stay equal. At the end each rank logs its
  weights hash and rank 0 fails the run if they differ.
- **Loss and diagnostics of the whole mini-batch.** Every rank gathers the per-set log-ratios and
  the per-member token log-ratios, puts them back in the mini-batch's order and evaluates the
  surrogate on all S sets with the single process's function (srpo_loss.set_surrogates).

``SRPO_TRAINER_FAULT=<rank>:<update>:<point>`` (tests only) kills the process with SIGKILL at one
point of one update: ``before-allreduce`` (the rank's shard is backpropagated, the gradients are
not reduced), ``after-checkpoint`` (rank 0: the checkpoint is written, the record is not),
``torn-record`` (rank 0: half the update's record line is written), ``after-record`` (rank 0: the
record is written, nothing published, the offsets not committed).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

FAULT_POINTS = ("before-allreduce", "after-checkpoint", "torn-record", "after-record")


def shard(n_sets: int, rank: int, world: int) -> List[int]:
    """The indices of the sets rank ``rank`` trains: rank, rank + world, ... (strided, deterministic)."""
    return list(range(rank, n_sets, world))


def fault(point: str, update: int, rank: int) -> bool:
    """True when SRPO_TRAINER_FAULT names this rank, update and point (the caller then calls ``die``)."""
    spec = os.environ.get("SRPO_TRAINER_FAULT")
    if not spec:
        return False
    r, u, p = spec.split(":", 2)
    if p not in FAULT_POINTS:
        raise ValueError(f"SRPO_TRAINER_FAULT: unknown point {p!r}; one of {', '.join(FAULT_POINTS)}")
    return int(r) == rank and int(u) == update and p == point


def die(point: str, update: int, rank: int) -> None:
    print(json.dumps({"level": "warn", "msg": "fault injected: SIGKILL", "component": "python-trainer", "rank": rank,
                      "update": update, "point": point}), file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


class Dist:
    """World size, rank and the few collectives the trainer uses; world 1 (no torchrun) does nothing."""

    def __init__(self, backend: Optional[str]) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.backend = backend
        if self.world > 1:  # a single process (no torchrun, or --nproc_per_node 1) needs no process group
            if backend is None:
                raise SystemExit("srpo_trainer: launched by torchrun (WORLD_SIZE > 1): pass --backend gloo (CPU) or nccl (GPUs)")
            if backend == "nccl":
                torch.cuda.set_device(self.local_rank)
            dist.init_process_group(backend=backend)
            self.world, self.rank = dist.get_world_size(), dist.get_rank()

    @property
    def on(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def broadcast(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank (pickled; tensors must be on the CPU)."""
        if not self.on:
            return obj
        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> List[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.on:
            return [obj]
        out: List[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def wrap(model: torch.nn.Module, d: Dist, device: str) -> torch.nn.Module:
    """DDP around the model (its parameters broadcast from rank 0 once, here; no buffer broadcast per forward)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [torch.device(device).index] if device.startswith("cuda") else None
    return DDP(model, device_ids=ids, broadcast_buffers=False)


def sync_without_sets(ddp: torch.nn.Module, device: str) -> None:
    """A rank with no set still joins the step's all-reduce: a one-token forward, backpropagated times 0."""
    logits = ddp(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device)).logits
    (logits.float().sum() * 0.0).backward()


def assemble(parts: List[Tuple[List[int], torch.Tensor, torch.Tensor, List[torch.Tensor]]], full: Dict[str, torch.Tensor],
             sets: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    """The ranks' (set indices, log_rho, k, per-member token log-ratio rows) back in the mini-batch's order."""
    s = len(sets)
    log_rho = torch.zeros(s, dtype=torch.float32)
    k = torch.zeros(s, dtype=torch.float32)
    tokens = torch.zeros(full["mask"].shape, dtype=torch.float32)
    first_row = [0] * (s + 1)
    for i, st in enumerate(sets):
        first_row[i + 1] = first_row[i] + len(st["members"])
    for idx, lr, kk, rows in parts:
        for j, i in enumerate(idx):
            log_rho[i], k[i] = lr[j], kk[j]
        r = 0
        for i in idx:
            for m in range(len(sets[i]["members"])):
                row = rows[r]
                tokens[first_row[i] + m, : row.shape[0]] = row
                r += 1
    dev = full["mask"].device
    return {"log_rho": log_rho.to(dev), "k": k.to(dev), "tokens": tokens.to(dev)}
