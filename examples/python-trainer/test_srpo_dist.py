"""Unit checks of the distributed step without torchrun:  python3 -m unittest examples/python-trainer/test_srpo_dist.py

- ``shard``: rank r takes sets r, r + W, ...; every set once, uneven and empty shards;
- the normalization: each rank's shard backpropagated with ``loss_scale = W / S``, the W gradients
  averaged as DDP averages them, is the single pass's gradient (mean over all S sets), for an uneven
  split (3 of 5 sets and 2), in micro-batches, and with a rank holding no set; the assembled per-set
  log-ratios and token log-ratios give the single pass's loss and diagnostics;
- ``read_records``: a last line cut short is left out (and cut off with ``repair``); a damaged line
  elsewhere stops the resume.
"""

import json
import os
import sys
import tempfile
import unittest

import torch

torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import srpo_dist as D  # noqa: E402
import srpo_loss as L  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CFG = {"objective": "srpo", "eventReduction": "sqrt", "clipLow": 0.2, "clipHigh": 0.2, "dualClip": True, "clipRatioC": 3.0}


class Shard(unittest.TestCase):
    def test_strided_every_set_once(self):
        self.assertEqual([D.shard(5, r, 2) for r in range(2)], [[0, 2, 4], [1, 3]])
        self.assertEqual([D.shard(1, r, 2) for r in range(2)], [[0], []])
        self.assertEqual([D.shard(7, r, 3) for r in range(3)], [[0, 3, 6], [1, 4], [2, 5]])


def fixture():
    from transformers import AutoModelForCausalLM

    d = os.path.join(REPO, "libs", "hf", "fixtures", "qwen2")
    with open(os.path.join(d, "grad-case.json"), encoding="utf-8") as f:
        case = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    sets = [{"setId": s["setId"], "advantage": s["advantage"], "members": [
        {"outputId": m["outputId"], "context": m["contextTokens"], "response": m["responseTokens"], "logpOld": m["logpOld"],
         "mask": [1.0] * len(m["responseTokens"]), "temperature": 1.0} for m in s["members"]]} for s in case["sets"]]
    return model, sets


class ShardedGradient(unittest.TestCase):
    def grads(self, model):
        return {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p) for n, p in model.named_parameters()}

    def check(self, model, sets, world, micro):
        s = len(sets)
        full = L.pack(sets, model.config.max_position_embeddings)
        model.zero_grad(set_to_none=True)
        ref, n = L.objective_and_backward(model, full, CFG, 1.0, micro)
        self.assertEqual(n > 1, micro > 0)
        g_ref = self.grads(model)
        total = {n: torch.zeros_like(g) for n, g in g_ref.items()}
        parts = []
        for r in range(world):
            idx = D.shard(s, r, world)
            model.zero_grad(set_to_none=True)
            if idx:
                b = L.pack([sets[i] for i in idx], model.config.max_position_embeddings)
                o, _ = L.objective_and_backward(model, b, CFG, 1.0, micro, loss_scale=world / s)
                parts.append((idx, o["log_rho"].detach(), o["k"].detach(), list(o["tokens"].detach())))
            else:
                parts.append((idx, torch.zeros(0), torch.zeros(0), []))
            for n, g in self.grads(model).items():
                total[n] += g
        whole = D.assemble(parts, full, sets)
        whole["loss"] = -L.set_surrogates(whole["log_rho"], full["advantage"], CFG).mean()
        self.assertLess(abs(float(whole["loss"]) - float(ref["loss"].detach())), 1e-6)
        dw, dr = L.diagnostics(whole, full, CFG), L.diagnostics(ref, full, CFG)
        for key in dr:
            self.assertAlmostEqual(dw[key], dr[key], delta=1e-6 * max(1.0, abs(dr[key])), msg=key)
        for n, g in g_ref.items():
            avg = total[n] / world  # DDP's average
            scale = float(g.abs().max()) or 1.0
            self.assertLess(float((avg - g).abs().max()) / scale, 1e-5, n)

    def test_uneven_split_micro_batches_and_an_empty_rank(self):
        model, sets = fixture()
        self.assertGreaterEqual(len(sets), 3)
        self.check(model, sets, 2, 0)  # uneven when the set count is odd
        self.check(model, sets[:3], 2, 0)  # 2 sets and 1
        self.check(model, sets, 2, 22)  # micro-batches of 2 rows (at most 11 positions each) per shard
        self.check(model, sets[:1], 2, 0)  # one set: rank 1 has none and adds a zero gradient


class Records(unittest.TestCase):
    def test_a_torn_last_line_is_left_out_and_cut_off(self):
        import srpo_trainer as T

        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "r.jsonl")
            whole = json.dumps({"kind": "update", "versionAfter": 1}) + "\n"
            with open(p, "w", encoding="utf-8") as f:
                f.write(whole + json.dumps({"kind": "update", "versionAfter": 2})[:20])
            self.assertEqual([r["versionAfter"] for r in T.read_records(p, repair=False)], [1])
            self.assertEqual(os.path.getsize(p), len(whole) + 20)  # not repaired
            self.assertEqual([r["versionAfter"] for r in T.read_records(p, repair=True)], [1])
            with open(p, encoding="utf-8") as f:
                self.assertEqual(f.read(), whole)
            with open(p, "w", encoding="utf-8") as f:
                f.write("{not json\n" + whole)
            with self.assertRaises(SystemExit):
                T.read_records(p, repair=True)


if __name__ == "__main__":
    unittest.main()
