"""Unit checks of srpo_loss.py without Kafka:  python3 -m unittest examples/python-trainer/test_srpo_loss.py

- the bounded evaluation: a set with a floor behaviour log-prob (-9999) gives the finite loss
  libs/srpo records against PyTorch float64 (libs/srpo/src/objective-overflow.spec.ts, TORCH),
  for every event reduction, and finite gradients;
- the batched, right-padded forward on the qwen2 fixture gives the loss of
  scripts/reference/make_hf_grad_fixture.py (one forward per member) in grad-case.json;
- micro-batches (--micro-batch-tokens) give the single pass's loss and gradients.
"""

import json
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import srpo_loss as L  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CFG = {"objective": "srpo", "eventReduction": "sqrt", "clipLow": 0.2, "clipHigh": 0.2, "dualClip": True, "clipRatioC": 3.0}
# (setId, advantage, [(logpOld, logpNew, mask)]) from libs/srpo/reference/overflow_reference.py
BATCH = [
    ("p1", 1.0, [([-1.2, -0.7, -2.3], [-1.1, -0.75, -2.2], [1, 1, 1]), ([-0.4, -1.9], [-0.45, -1.8], [1, 1])]),
    ("n1", -0.8, [([-0.9, -9999.0, -1.4], [-1.0, -3.2, -1.3], [1, 1, 1]), ([-2.0, -0.6], [-2.1, -0.5], [1, 1])]),
    ("n2", -0.5, [([-1.5, -0.3, -0.8, -2.2], [-1.3, -0.35, -0.7, -2.0], [1, 1, 0, 1])]),
    ("p2", 0.3, [([-0.5], [-0.6], [1]), ([-1.0, -1.1], [-0.9, -1.3], [1, 1]), ([-2.5, -0.2], [-2.4, -0.25], [1, 0])]),
]
TORCH_LOSS_WITH_DUAL = {"sqrt": 0.4186134704795184, "sum": 0.4095206434655313, "mean": 0.428549512577263}


def padded(rows):
    t = max(len(r) for r in rows)
    return torch.tensor([list(r) + [0.0] * (t - len(r)) for r in rows], dtype=torch.float32)


class BoundedObjective(unittest.TestCase):
    def test_floor_log_prob_gives_the_reference_loss(self):
        members = [m for _, _, ms in BATCH for m in ms]
        b = {
            "logp_old": padded([m[0] for m in members]),
            "mask": padded([m[2] for m in members]),
            "member_set": torch.tensor([i for i, (_, _, ms) in enumerate(BATCH) for _ in ms]),
            "advantage": torch.tensor([a for _, a, _ in BATCH], dtype=torch.float32),
        }
        for reduction, expected in TORCH_LOSS_WITH_DUAL.items():
            logp_new = (padded([m[1] for m in members]) * b["mask"]).requires_grad_(True)
            out = L.srpo_objective(logp_new, b, {**CFG, "eventReduction": reduction})
            out["loss"].backward()
            self.assertAlmostEqual(float(out["loss"].detach()), expected, delta=1e-5, msg=reduction)
            self.assertTrue(bool(torch.isfinite(logp_new.grad).all()), reduction)
            self.assertEqual(L.diagnostics(out, b, CFG)["ratio/out_of_range"], 1.0)


def fixture_case():
    from transformers import AutoModelForCausalLM

    d = os.path.join(REPO, "libs", "hf", "fixtures", "qwen2")
    with open(os.path.join(d, "grad-case.json"), encoding="utf-8") as f:
        case = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    return case, model


class HfFixtureLoss(unittest.TestCase):
    def test_batched_forward_matches_the_per_member_reference(self):
        case, model = fixture_case()
        sets = [{"setId": s["setId"], "advantage": s["advantage"], "members": [
            {"outputId": m["outputId"], "context": m["contextTokens"], "response": m["responseTokens"], "logpOld": m["logpOld"],
             "mask": [1.0] * len(m["responseTokens"]), "temperature": 1.0} for m in s["members"]]} for s in case["sets"]]
        L.check_sets(sets, model.config.max_position_embeddings, model.config.vocab_size)
        b = L.pack(sets, model.config.max_position_embeddings)
        with torch.no_grad():
            out = L.srpo_objective(L.token_log_probs(model, b, 1.0), b, {**CFG, "dualClip": False})
        self.assertAlmostEqual(float(out["loss"]), case["loss"], delta=1e-5)

    def test_micro_batches_give_the_single_pass_loss_and_gradients(self):
        case, model = fixture_case()
        sets = [{"setId": s["setId"], "advantage": s["advantage"], "members": [
            {"outputId": m["outputId"], "context": m["contextTokens"], "response": m["responseTokens"], "logpOld": m["logpOld"],
             "mask": [1.0] * len(m["responseTokens"]), "temperature": 1.0} for m in s["members"]]} for s in case["sets"]]
        b = L.pack(sets, model.config.max_position_embeddings)
        runs = []
        for budget in (0, 2 * int(b["lengths"].max())):
            model.zero_grad(set_to_none=True)
            out, micro = L.objective_and_backward(model, b, CFG, 1.0, budget)
            runs.append((float(out["loss"].detach()), micro, {n: p.grad.clone() for n, p in model.named_parameters()}))
        (loss1, m1, g1), (loss2, m2, g2) = runs
        self.assertEqual(m1, 1)
        self.assertGreaterEqual(m2, 3)
        self.assertAlmostEqual(loss1, loss2, delta=1e-6)
        for n in g1:
            scale = float(g1[n].abs().max()) or 1.0
            self.assertLess(float((g1[n] - g2[n]).abs().max()) / scale, 1e-5, n)


if __name__ == "__main__":
    unittest.main()
