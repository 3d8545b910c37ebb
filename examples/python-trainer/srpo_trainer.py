#!/usr/bin/env python3
"""SRPO updates in PyTorch from the AdvantageGroup topic: the learner's contract, outside the learner.

Consumes ``<prefix>advantage-groups`` (read_committed, its own consumer group), forms the
learner's mini-batches (per partition, the shortest run of consecutive groups of the policy
holding at least ``--sets-per-update`` sets; a set is never split), computes the learner's SRPO
loss on a Hugging Face model directory (srpo_loss.py) and steps Adam like the learner (betas
0.9/0.999, eps 1e-8, global-norm clip 1.0, constant lr). Each update is recorded as the learner
records it: one JSON line with the learner's update-record fields and the ledger rows of its
groups (Kafka coordinates of every source event), optionally a checkpoint directory and the
PolicyUpdate / PolicyVersion events. Offsets are committed after the record is written.

    python3 examples/python-trainer/srpo_trainer.py --model-dir DIR --policy solver \\
        --topic-prefix srpo. --sets-per-update 16 --records updates.jsonl --checkpoint-dir ckpt

``--loss-only`` (alias ``--dry-run``) steps nothing and commits nothing: one JSON line per
mini-batch, ``{groupIds, loss, sets, coordinates, ...}``. Nothing logged carries prompt or
response content, or a content key: only ids, counts, coordinates and numbers.

Sealed outputs (docs/erasure.md) are opened with ``--content-keys STORE`` (the learner's store: a
SQLite file, read-only, or a postgres:// URL with psycopg installed): the keys of a mini-batch in one
query, as the learner does. A set with a member whose key is gone (``srpo erase``) is left out and
its group renormalized over the sets left (srpo_groups.group_without); a group with none left is
skipped as ``erased``; the update record counts them in ``setsErased``. Without the option, a
group with a sealed member is skipped as ``invalid-input``.

Requirements: ``python3 -m pip install -r examples/python-trainer/requirements.txt``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
INSTALL = "python3 -m pip install -r examples/python-trainer/requirements.txt"
sys.path.insert(0, HERE)
try:
    import torch
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    import srpo_dist
    import srpo_loss as L
    from srpo_events import DecodeError, EventCodec, coordinates, ledger_entry
    from srpo_groups import GroupValueError, group_without
    from srpo_seal import ContentKeyStore, KeyStoreError
except ImportError as e:  # say how to fix it, in one line
    sys.exit(f"srpo_trainer: missing Python package ({e}); install with: {INSTALL}")

BASE_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja", "special_tokens_map.json")


def log(level: str, msg: str, **fields: Any) -> None:
    print(json.dumps({"level": level, "msg": msg, "component": "python-trainer", **fields}), file=sys.stderr, flush=True)


def parse_args(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--model-dir", required=True, help="Hugging Face model directory (version 0)")
    a("--policy", required=True, help="policy id whose groups are trained (SRPO_POLICY_ID)")
    a("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    a("--topic-prefix", default=os.environ.get("SRPO_TOPIC_PREFIX", "srpo."))
    a("--group-id", default=None, help="consumer group (default srpo-python-trainer.<policy>)")
    a("--sets-per-update", type=int, default=16, help="SRPO_SETS_PER_UPDATE")
    a("--lr", type=float, default=3e-4)
    a("--epochs", type=int, default=1)
    a("--max-grad-norm", type=float, default=1.0, help="global-norm clip; 0 disables")
    a("--micro-batch-tokens", type=int, default=0, help="SRPO_MICRO_BATCH_TOKENS: largest padded forward pass; 0: one pass")
    a("--max-policy-lag", type=int, default=4)
    a("--event-reduction", choices=["sqrt", "sum", "mean"], default="sqrt")
    a("--clip-low", type=float, default=0.2)
    a("--clip-high", type=float, default=0.2)
    a("--no-dual-clip", action="store_true")
    a("--clip-ratio-c", type=float, default=3.0)
    a("--loss-only", "--dry-run", dest="loss_only", action="store_true", help="print each mini-batch's loss; no step, no commit")
    a("--records", default=None, help="JSONL file the update and skip records are appended to (and resumed from)")
    a("--checkpoint-dir", default=None, help="writes <dir>/<policy>/v<N>/ (HF layout + optimizer.pt) per update")
    a("--publish", action="store_true", help="publish PolicyUpdate and PolicyVersion events")
    a("--output-prefix", default=None, help="topic prefix of the published events (default --topic-prefix)")
    a("--schema-registry-url", default=os.environ.get("SRPO_SCHEMA_REGISTRY_URL"))
    a("--content-keys", default=None, metavar="PATH_OR_URL",
      help="the store holding the content keys of sealed outputs (subject_keys): the learner's SQLite file "
           "(SRPO_SQLITE_PATH, opened read-only) or its postgres:// URL (SRPO_DATABASE_URL; needs psycopg)")
    a("--content-keys-schema", default=os.environ.get("SRPO_DATABASE_SCHEMA"), help="PostgreSQL schema of --content-keys (SRPO_DATABASE_SCHEMA)")
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a("--backend", choices=["gloo", "nccl"], default=None,
      help="torch.distributed backend under torchrun (gloo: CPU, nccl: one GPU per rank); rank 0 reads Kafka and writes, every rank trains a share of each mini-batch's sets")
    a("--max-batches", type=int, default=0, help="stop after N mini-batches (0: no limit)")
    a("--exit-at-end", action="store_true", help="stop once every assigned partition is read to its end")
    a("--code-version", default="srpo-python-trainer@1")
    args = p.parse_args(argv)
    if args.sets_per_update < 1 or args.epochs < 1 or args.micro_batch_tokens < 0 or args.lr < 0 or args.max_grad_norm < 0 or not 0 <= args.clip_low <= 1 or args.clip_high < 0 or not args.clip_ratio_c > 1:
        p.error("out of range: --sets-per-update, --epochs >= 1; --lr, --max-grad-norm, --clip-high >= 0; --clip-low in [0, 1]; --clip-ratio-c > 1")
    return args


class Trainer:
    def __init__(self, args: argparse.Namespace, d: Optional["srpo_dist.Dist"] = None) -> None:
        self.args = args
        self.dist = d or srpo_dist.Dist(None)
        if self.dist.on and args.device.startswith("cuda") and ":" not in args.device:
            args.device = f"cuda:{self.dist.local_rank}"  # one GPU per rank
        # The content-key store first: a wrong --content-keys fails before the model is loaded. Rank 0's only:
        # it triages and opens the sets, the other ranks receive them opened.
        self.key_store: Optional[ContentKeyStore] = None
        if args.content_keys and self.dist.main:
            try:
                self.key_store = ContentKeyStore(args.content_keys, args.content_keys_schema)
            except KeyStoreError as e:
                sys.exit(f"srpo_trainer: {e}")
            log("info", "content keys", store=self.key_store.kind)  # never the URL: it may carry a password
        self.sets_erased_total = 0
        reg_auth = None
        if os.environ.get("SRPO_SCHEMA_REGISTRY_USER"):
            reg_auth = f"{os.environ['SRPO_SCHEMA_REGISTRY_USER']}:{os.environ.get('SRPO_SCHEMA_REGISTRY_PASSWORD', '')}"
        self.codec = EventCodec(os.path.join(REPO, "schemas"), args.schema_registry_url, reg_auth)
        self.objective = {"objective": "srpo", "eventReduction": args.event_reduction, "clipLow": args.clip_low,
                          "clipHigh": args.clip_high, "dualClip": not args.no_dual_clip, "clipRatioC": args.clip_ratio_c}
        self.version, self.checkpoint_uri, self.applied = 0, os.path.abspath(args.model_dir), set()
        start_dir = args.model_dir
        last = self._read_records() if self.dist.main else None  # the records are rank 0's
        if last is not None:  # resume: the newest recorded update's checkpoint is the current version
            if not last["checkpointUri"] or not os.path.isdir(last["checkpointUri"]):
                sys.exit(f"srpo_trainer: {args.records} ends at version {last['versionAfter']} but its checkpoint "
                         f"({last['checkpointUri'] or 'none: run with --checkpoint-dir'}) is not on disk; cannot resume")
            start_dir = last["checkpointUri"]
            self.version, self.checkpoint_uri = last["versionAfter"], start_dir
        if self.dist.on:  # every rank starts where rank 0's records say (a directory every rank can read)
            start = self.dist.broadcast({"version": self.version, "dir": start_dir, "last": last and {"weightsHashAfter": last["weightsHashAfter"]}})
            self.version, start_dir, last = start["version"], start["dir"], start["last"]
            self.checkpoint_uri = start_dir
        self.model = AutoModelForCausalLM.from_pretrained(start_dir, dtype=torch.float32, attn_implementation="eager").to(args.device)
        self.model.eval()  # the learner's forward has no dropout
        self.max_seq_len = int(self.model.config.max_position_embeddings)
        self.vocab = int(self.model.config.vocab_size)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
        self.hash = L.weights_hash(self.model)
        if last is not None:
            if self.hash != last["weightsHashAfter"]:
                sys.exit(f"srpo_trainer: {start_dir} holds weights {self.hash}, the records say {last['weightsHashAfter']}")
            opt = os.path.join(start_dir, "optimizer.pt")
            if os.path.exists(opt):
                self.optimizer.load_state_dict(torch.load(opt, map_location=args.device))
        self.ddp = None
        if self.dist.on:
            hashes = self.dist.gather(self.hash)
            if len(set(hashes)) != 1:
                sys.exit(f"srpo_trainer: the ranks loaded different weights ({', '.join(hashes)})")
            self.ddp = srpo_dist.wrap(self.model, self.dist, args.device)
        log("info", "trainer ready", policy=args.policy, version=self.version, weightsHash=self.hash, device=args.device, lossOnly=args.loss_only,
            **self._where())
        self.producer = None
        if args.publish and not args.loss_only and self.dist.main:
            self.producer = Producer({"bootstrap.servers": args.brokers, "enable.idempotence": True, "acks": "all"})

    def _where(self) -> Dict[str, Any]:
        return {"rank": self.dist.rank, "worldSize": self.dist.world, "distBackend": self.dist.backend} if self.dist.on else {}

    def _fault(self, point: str, update: int) -> None:
        if srpo_dist.fault(point, update, self.dist.rank):
            srpo_dist.die(point, update, self.dist.rank)

    def _read_records(self) -> Optional[Dict[str, Any]]:
        last = None
        if self.args.records and os.path.exists(self.args.records):
            for r in read_records(self.args.records, repair=not self.args.loss_only):
                if r.get("kind") == "update":
                    self.applied.update(g["groupId"] for g in r["groups"])
                    last = r
                elif r.get("kind") == "skip":
                    self.applied.add(r["groupId"])
        return last

    def _append(self, record: Dict[str, Any]) -> None:
        if self.args.records:
            line = json.dumps(record) + "\n"
            torn = record.get("kind") == "update" and srpo_dist.fault("torn-record", record["versionAfter"], self.dist.rank)
            with open(self.args.records, "a", encoding="utf-8") as f:
                f.write(line[: len(line) // 2] if torn else line)
                f.flush()
                os.fsync(f.fileno())
            if torn:
                srpo_dist.die("torn-record", record["versionAfter"], self.dist.rank)

    # -- sealed content (libs/trainer/src/training-sets.ts) --
    def sealed_key_ids(self, group: Dict[str, Any]) -> Dict[str, List[str]]:
        """The key ids of the group's sealed members, by set id (sets with none left out); a member that
        does not decode names no key (triage refuses its group with the reason)."""
        out: Dict[str, List[str]] = {}
        for gs in group["sets"]:
            ids = []
            for m in gs["set"]["members"]:
                try:
                    sealed = self.codec.decode_as("AgentOutput", m["output"]).get("sealed")
                except DecodeError:
                    continue
                if sealed is not None:
                    ids.append(sealed["keyId"])
            if ids:
                out[gs["set"]["setId"]] = ids
        return out

    def without_erased_sets(self, group: Dict[str, Any], keys: Dict[str, bytes], source: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], int]:
        """The group without its sets of erased content, renormalized (groupWithout); None when none is left."""
        erased = {set_id for set_id, ids in self.sealed_key_ids(group).items() if any(i not in keys for i in ids)}
        if not erased:
            return group, 0
        log("info", "sets of erased content left out", groupId=group["groupId"], sets=len(erased), **coordinates(source))
        return group_without(group, erased), len(erased)

    # -- triage: the learner's skip reasons (apps/learner/src/update.service.ts) --
    def triage(self, group: Dict[str, Any], used: set, keys: Optional[Dict[str, bytes]] = None) -> Tuple[Optional[str], Optional[str], Any]:
        if not group["sets"]:
            return "invalid-set", "the group has no sets", None
        temps, oldest, newest = set(), None, None
        for gs in group["sets"]:
            s = gs["set"]
            if s["status"] != "COMPLETE" or not s["members"]:
                return "invalid-set", f"set {s['setId']} is {s['status']} with {len(s['members'])} member(s)", None
            for m in s["members"]:
                if m["policyId"] != self.args.policy:
                    return "foreign-member", f"member {m['outputId']} of set {s['setId']} belongs to policy {m['policyId']}", None
                oldest = m["policyVersion"] if oldest is None else min(oldest, m["policyVersion"])
                newest = m["policyVersion"] if newest is None else max(newest, m["policyVersion"])
                temps.add(m["temperature"])
        lag = self.version - oldest
        if newest > self.version:
            return "future-version", f"a member was sampled at version {newest}, the trainer is at {self.version}", lag
        if lag > self.args.max_policy_lag:
            return "stale", f"oldest member at version {oldest}, trainer at {self.version}, lag limit {self.args.max_policy_lag}", lag
        if len(temps) > 1:
            return "mixed-temperature", f"members sampled at temperatures {sorted(temps)}", lag
        try:
            sets = L.training_sets(self.codec, group, keys)
            L.check_sets(sets, self.max_seq_len, self.vocab)
        except (L.InvalidInput, DecodeError) as e:
            return "invalid-input", str(e), lag
        ids = [f"set {s['setId']}" for s in sets] + [f"output {m['outputId']}" for s in sets for m in s["members"]]
        dup = next((i for i in ids if i in used), None)
        if dup:
            return "duplicate-set", f"{dup} is already in another group of this mini-batch", lag
        used.update(ids)
        return None, None, (sets, temps.pop(), lag)

    def apply(self, batch: List[Tuple[Dict[str, Any], Dict[str, Any]]]) -> Dict[str, Any]:
        eligible, skipped, used = [], [], set()
        batch = [(g, s) for g, s in batch if g["groupId"] not in self.applied]  # redeliveries of groups already recorded
        keys: Optional[Dict[str, bytes]] = None
        if self.key_store is not None:  # the keys of every sealed member of the mini-batch, in one query
            keys = self.key_store.keys_by_id([i for g, _ in batch for ids in self.sealed_key_ids(g).values() for i in ids])
        sets_erased = 0
        for group, source in batch:
            if keys is not None:  # erased sets out first, as the learner's UpdateCycle (libs/trainer/src/update-cycle.ts)
                try:
                    reduced, n = self.without_erased_sets(group, keys, source)
                    reason, detail = (None, None) if reduced is not None else ("erased", "every set holds erased content")
                except GroupValueError as e:  # a recorded objectiveConfig groupWithout cannot read
                    reduced, n, reason, detail = None, 0, "invalid-input", f"the group cannot be renormalized without its erased sets: {e}"
                sets_erased += n
                if reason:
                    skipped.append({"kind": "skip", "policyId": self.args.policy, "groupId": group["groupId"], "reason": reason, "detail": detail,
                                    "lag": None, "policyVersion": self.version, "source": coordinates(source), "createdAtMs": int(time.time() * 1000)})
                    continue
                group = reduced
            reason, detail, ok = self.triage(group, used, keys)
            if reason:
                skipped.append({"kind": "skip", "policyId": self.args.policy, "groupId": group["groupId"], "reason": reason, "detail": detail,
                                "lag": ok, "policyVersion": self.version, "source": coordinates(source), "createdAtMs": int(time.time() * 1000)})
            else:
                eligible.append((group, source, *ok))
        if eligible:  # one temperature per update: the one most sets were sampled at (ties: the lower)
            weight: Dict[float, int] = {}
            for e in eligible:
                weight[e[3]] = weight.get(e[3], 0) + len(e[2])
            chosen = sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            for group, source, _, t, lag in [e for e in eligible if e[3] != chosen]:
                skipped.append({"kind": "skip", "policyId": self.args.policy, "groupId": group["groupId"], "reason": "temperature-mismatch",
                                "detail": f"sampled at {t}, this update at {chosen}", "lag": lag, "policyVersion": self.version,
                                "source": coordinates(source), "createdAtMs": int(time.time() * 1000)})
            eligible = [e for e in eligible if e[3] == chosen]
        for s in skipped:
            log("warn", "group skipped", groupId=s["groupId"], reason=s["reason"], detail=s["detail"], **s["source"])
        self.sets_erased_total += sets_erased
        out = {"groupIds": [e[0]["groupId"] for e in eligible], "coordinates": [coordinates(e[1]) for e in eligible],
               "skipped": [{"groupId": s["groupId"], "reason": s["reason"]} for s in skipped], "setsErased": sets_erased}
        if not eligible:
            if not self.args.loss_only:
                for s in skipped:
                    self._append(s)
                    self.applied.add(s["groupId"])
            return {**out, "loss": None, "sets": 0}
        sets = [s for e in eligible for s in e[2]]
        temperature = eligible[0][3]
        if self.args.loss_only:
            d = self.run("loss", sets, temperature, self.version + 1)
            return {**out, "loss": d["losses/loss"], "sets": len(sets), "temperature": temperature, "version": self.version, "diagnostics": d}
        return self.step(eligible, skipped, sets, temperature, out)

    # -- the computation, on every rank (rank 0 broadcasts what to compute; srpo_dist.py) --
    def run(self, op: str, sets: List[Dict[str, Any]], temperature: float, update: int) -> Any:
        """``op`` "loss": the diagnostics at the current weights; "train": ``train``'s tuple. Rank 0 calls it
        with the sets it triaged and broadcasts them first; the other ranks call it with what they received."""
        if self.dist.on and self.dist.main:
            self.dist.broadcast({"op": op, "sets": sets, "temperature": temperature, "update": update})
        if op == "loss":
            with torch.no_grad():
                o, full, _ = self.objective_on_ranks(sets, temperature, update, backward=False)
            return L.diagnostics(o, full, self.objective)
        return self.train(sets, temperature, update)

    def objective_on_ranks(self, sets: List[Dict[str, Any]], temperature: float, update: int, backward: bool):
        """The objective of the whole mini-batch, ``(output, packed batch, micro-batches)``, and with ``backward``
        its gradient in .grad; distributed: this rank's shard backpropagated, DDP's all-reduce, the output assembled."""
        full = L.pack(sets, self.max_seq_len, self.args.device)
        micro = self.args.micro_batch_tokens
        if not self.dist.on:
            if not backward:
                return L.srpo_objective(L.token_log_probs(self.model, full, temperature), full, self.objective), full, 1
            o, n = L.objective_and_backward(self.model, full, self.objective, temperature, micro,
                                            before_sync=lambda: self._fault("before-allreduce", update))
            return o, full, n
        idx = srpo_dist.shard(len(sets), self.dist.rank, self.dist.world)
        local = L.pack([sets[i] for i in idx], self.max_seq_len, self.args.device) if idx else None
        n = 0
        if not backward:
            o = L.srpo_objective(L.token_log_probs(self.model, local, temperature), local, self.objective) if idx else None
        elif idx:
            o, n = L.objective_and_backward(self.ddp, local, self.objective, temperature, micro, loss_scale=self.dist.world / len(sets),
                                            no_sync=self.ddp.no_sync, before_sync=lambda: self._fault("before-allreduce", update))
        else:  # fewer sets than ranks: this one only joins the all-reduce
            o = None
            self._fault("before-allreduce", update)
            srpo_dist.sync_without_sets(self.ddp, self.args.device)
        empty = torch.zeros(0)
        part = (idx, o["log_rho"].detach().cpu(), o["k"].detach().cpu(), [r for r in o["tokens"].detach().cpu()], n) if idx else (idx, empty, empty, [], n)
        parts = self.dist.gather(part)
        whole = srpo_dist.assemble([p[:4] for p in parts], full, sets)
        whole["loss"] = -L.set_surrogates(whole["log_rho"], full["advantage"], self.objective).mean()
        return whole, full, sum(p[4] for p in parts)

    def train(self, sets: List[Dict[str, Any]], temperature: float, update: int) -> Tuple[Dict[str, float], float, int, Optional[float], bool]:
        """The Adam step(s) of one mini-batch on every rank: ``(diagnostics, gradient norm, micro-batches, first loss, finite)``."""
        snapshot = (copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.optimizer.state_dict())) if self.args.epochs > 1 else None
        first_loss, d, grad_norm, micro = None, {}, 0.0, 0
        for epoch in range(self.args.epochs):
            self.optimizer.zero_grad(set_to_none=True)
            o, full, micro = self.objective_on_ranks(sets, temperature, update, backward=True)
            if self.args.max_grad_norm > 0:  # clip coefficient min(1, max / (norm + 1e-6)), as the learner's Adam
                norm = torch.nn.utils.clip_grad_norm_(self.params, self.args.max_grad_norm)
            else:
                norm = torch.sqrt(sum(torch.sum(p.grad.float() ** 2) for p in self.params if p.grad is not None))
            d = L.diagnostics(o, full, self.objective)
            grad_norm = float(norm)
            first_loss = d["losses/loss"] if first_loss is None else first_loss
            if not (torch.isfinite(o["loss"]) and torch.isfinite(norm)):  # the same on every rank: the loss and norm are the whole batch's
                if snapshot:
                    self.model.load_state_dict(snapshot[0])
                    self.optimizer.load_state_dict(snapshot[1])
                return d, grad_norm, micro, first_loss, False
            self.optimizer.step()
        return d, grad_norm, micro, first_loss, True

    def step(self, eligible: list, skipped: list, sets: list, temperature: float, out: Dict[str, Any]) -> Dict[str, Any]:
        started = time.time()
        d, grad_norm, micro, first_loss, finite = self.run("train", sets, temperature, self.version + 1)
        if not finite:
            detail = f"loss {d['losses/loss']}, gradient norm {grad_norm}"
            skipped += [{"kind": "skip", "policyId": self.args.policy, "groupId": e[0]["groupId"], "reason": "non-finite-loss", "detail": detail,
                         "lag": e[4], "policyVersion": self.version, "source": coordinates(e[1]), "createdAtMs": int(time.time() * 1000)} for e in eligible]
            log("error", "non-finite step; nothing applied and its groups skipped", detail=detail)
            for s in skipped:
                self._append(s)
                self.applied.add(s["groupId"])
            return {**out, "groupIds": [], "loss": None, "sets": 0}
        d.update({"grad/norm": grad_norm, "optim/lr": float(self.args.lr), "epochs/count": float(self.args.epochs), "epochs/first_loss": first_loss,
                  "memory/micro_batches": float(micro)})
        if self.dist.on:  # micro_batches: summed over the ranks
            d["dist/world_size"] = float(self.dist.world)
        version_after = self.version + 1
        group_ids = [e[0]["groupId"] for e in eligible]
        update_id = f"{self.args.policy}.v{version_after}.{hashlib.sha256(chr(10).join(group_ids).encode()).hexdigest()[:12]}"
        hash_after = L.weights_hash(self.model)
        checkpoint_uri = self.save(version_after)
        self._fault("after-checkpoint", version_after)
        now = int(time.time() * 1000)
        record = {
            "kind": "update", "updateId": update_id, "policyId": self.args.policy,
            "versionBefore": self.version, "versionAfter": version_after,
            "weightsHashBefore": self.hash, "weightsHashAfter": hash_after,
            "hyperparameters": {"objective": dict(self.objective), "lr": self.args.lr, "epochs": self.args.epochs,
                                "maxGradNorm": self.args.max_grad_norm, "microBatchTokens": self.args.micro_batch_tokens,
                                "maxPolicyLag": self.args.max_policy_lag,
                                "setsPerUpdate": self.args.sets_per_update, "temperature": temperature,
                                "adam": {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weightDecay": 0}},
            "seed": 0, "backend": f"torch-{torch.__version__}-{self.args.device}" + (f"-{self.dist.backend}x{self.dist.world}" if self.dist.on else ""),
            "codeVersion": self.args.code_version,
            "loss": d["losses/loss"], "gradNorm": grad_norm, "diagnostics": d, "wallTimeMs": int((time.time() - started) * 1000),
            "checkpointUri": checkpoint_uri, "committedAtMs": now,
            "groups": [ledger_entry(e[0], e[1]) for e in eligible],  # the groups as trained: erased sets left out
            "setsErased": out["setsErased"],
        }
        for s in skipped:
            self._append(s)
        self._append(record)
        self._fault("after-record", version_after)
        self.applied.update(group_ids + [s["groupId"] for s in skipped])
        self.publish(record)
        self.version, self.hash, self.checkpoint_uri = version_after, hash_after, checkpoint_uri
        log("info", "update applied", updateId=update_id, versionAfter=version_after, groups=len(group_ids), sets=len(sets), loss=record["loss"],
            setsErased=out["setsErased"], setsErasedTotal=self.sets_erased_total)
        return {**out, "loss": record["loss"], "sets": len(sets), "update": record}

    def save(self, version: int) -> str:
        if not self.args.checkpoint_dir:
            return ""
        d = os.path.abspath(os.path.join(self.args.checkpoint_dir, self.args.policy, f"v{version}"))
        self.model.save_pretrained(d)
        torch.save(self.optimizer.state_dict(), os.path.join(d, "optimizer.pt"))
        for name in BASE_FILES:  # tokenizer and generation settings, so vLLM or transformers load the version as it is
            if os.path.exists(os.path.join(self.args.model_dir, name)):
                shutil.copyfile(os.path.join(self.args.model_dir, name), os.path.join(d, name))
        return d

    def publish(self, r: Dict[str, Any]) -> None:
        if self.producer is None:
            return
        prefix = self.args.output_prefix or self.args.topic_prefix
        update = {k: r[k] for k in ("updateId", "policyId", "versionBefore", "versionAfter", "weightsHashBefore", "weightsHashAfter",
                                     "loss", "gradNorm", "diagnostics", "checkpointUri", "backend")}
        update.update(groupIds=[g["groupId"] for g in r["groups"]], groupSources=[g["source"] for g in r["groups"]], objective="srpo", eventTimeMs=r["committedAtMs"])
        version = {"policyId": r["policyId"], "version": r["versionAfter"], "weightsHash": r["weightsHashAfter"],
                   "checkpointUri": r["checkpointUri"], "updateId": r["updateId"], "eventTimeMs": r["committedAtMs"]}
        key = r["policyId"].encode()
        self.producer.produce(prefix + "policy-updates", key=key, value=self.codec.encode("PolicyUpdate", update))
        self.producer.produce(prefix + "policy-versions", key=key, value=self.codec.encode("PolicyVersion", version))
        if self.producer.flush(30) != 0:
            raise RuntimeError("publishing PolicyUpdate/PolicyVersion did not complete within 30 s")


def read_records(path: str, repair: bool) -> List[Dict[str, Any]]:
    """The records file's complete lines. A last line without its newline is the write a crash cut short
    (the update it records was not applied: its offsets were not committed, and a restart trains it again):
    it is left out, and with ``repair`` cut off the file. Any other line that does not parse is an error."""
    with open(path, "rb") as f:
        data = f.read()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        log("warn", "records end in a partial line (a write cut short); it is not an update", records=path, bytes=len(data) - end, repaired=repair)
        if repair:
            with open(path, "r+b") as f:
                f.truncate(end)
                f.flush()
                os.fsync(f.fileno())
    out = []
    for n, line in enumerate(data[:end].decode("utf-8").splitlines(), 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            sys.exit(f"srpo_trainer: {path} line {n} is not a record ({e.msg}); not resuming from a damaged file")
    return out


def batch_size(queue: List[Tuple[Dict[str, Any], Dict[str, Any], int]], sets_per_update: int) -> int:
    """The learner's rule (kafka-group-source.ts): the shortest prefix holding >= sets_per_update sets; 0 waits."""
    n = 0
    for i, (group, _, _) in enumerate(queue):
        n += len(group["sets"])
        if n >= sets_per_update:
            return i + 1
    return 0


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    hf_logging.disable_progress_bar()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or args.backend:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))  # torchrun's default: one thread per rank
    d = srpo_dist.Dist(args.backend)
    trainer = Trainer(args, d)
    if d.main:
        consume(args, trainer)  # an exception ends this rank; torchrun then ends the others
        d.broadcast({"op": "stop"})
    else:  # the other ranks train what rank 0 broadcasts until it says stop
        while True:
            cmd = d.broadcast()
            if cmd["op"] == "stop":
                break
            trainer.run(cmd["op"], cmd["sets"], cmd["temperature"], cmd["update"])
    rc = 0
    if d.on:  # the weights are the same on every rank, or the run fails
        h = L.weights_hash(trainer.model)
        hashes = d.gather(h)
        log("info", "final weights", rank=d.rank, weightsHash=h, ranksAgree=len(set(hashes)) == 1)
        if d.main and len(set(hashes)) != 1:
            log("error", "the ranks' weights differ", weightsHashes=hashes)
            rc = 1
        d.close()
    return rc


def consume(args: argparse.Namespace, trainer: Trainer) -> None:
    """Rank 0's (or the only process's) loop: read, form mini-batches, apply them, commit."""
    topic = args.topic_prefix + "advantage-groups"
    consumer = Consumer({
        "bootstrap.servers": args.brokers, "group.id": args.group_id or f"srpo-python-trainer.{args.policy}",
        "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "enable.partition.eof": True, "client.id": "srpo-python-trainer",
    })
    assigned: set = set()
    at_end: set = set()
    queues: Dict[int, list] = {}
    read_up_to: Dict[int, int] = {}

    def on_assign(c: Any, parts: List[Any]) -> None:
        assigned.clear(); at_end.clear(); queues.clear(); read_up_to.clear()  # a rebalance forgets what was read but not trained
        assigned.update(p.partition for p in parts)

    def commit(partition: int, wait: bool) -> None:
        """Commits the first offset not yet trained on (or everything read); never in --loss-only."""
        q = queues.get(partition) or []
        offset = q[0][2] if q else read_up_to.get(partition)
        if offset is not None and not args.loss_only:
            consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=not wait)

    consumer.subscribe([topic], on_assign=on_assign)
    batches = 0
    try:
        while True:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    if args.exit_at_end and assigned and at_end >= assigned:
                        break
                    continue
                raise RuntimeError(f"consumer error: {msg.error()}")
            p, offset = msg.partition(), msg.offset()
            at_end.discard(p)
            source = {"topic": topic, "partition": p, "offset": offset}
            try:
                name, event = trainer.codec.decode(msg.value())
            except DecodeError as e:
                log("warn", "undecodable record skipped", reason=str(e), **source)
                name, event = None, None
            if name == "AdvantageGroup" and event["policyId"] == args.policy:
                queues.setdefault(p, []).append((event, source, offset))
            read_up_to[p] = offset + 1
            q = queues.setdefault(p, [])
            n = batch_size(q, args.sets_per_update)
            while n > 0:
                result = trainer.apply([(g, s) for g, s, _ in q[:n]])
                del q[:n]
                commit(p, wait=True)
                print(json.dumps({k: v for k, v in result.items() if k != "update"} if args.loss_only else result.get("update") or result), flush=True)
                batches += 1
                if args.max_batches and batches >= args.max_batches:
                    return
                n = batch_size(q, args.sets_per_update)
            if not q:
                commit(p, wait=False)
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
