"""The Python SRPO losses against libs/srpo, the one reference:  python3 -m unittest examples/python-trainer/test_srpo_reference.py

fixtures/srpo-reference-cases.json holds inputs and what libs/srpo's objectiveLoss gives for them
(loss, set log-ratios, set sizes, clip and range flags, the per-token gradient), written by
examples/python-trainer/make-reference-cases.ts and kept equal to the reference by
libs/srpo/src/reference-cases.spec.ts. Checked here, within float32 tolerance:

- srpo_loss.srpo_objective (this trainer's loss) and its diagnostics, on every case;
- the loss of bench/learner's PyTorch twins (torch_learner.py, torch_hf_learner.py), on the cases
  their formula covers: they evaluate the unbounded formula (no token bound, no MAX_LOG_RATIO
  bound; torch_learner.py has no dual clip), which is the reference's wherever every input is
  finite and every set in range (and, for torch_learner.py, no dual clip active).

Where the reference's loss is NaN its NaN spreads further than PyTorch's (tfjs's cpu backend sums
segments as products with 0/1 masks, NaN·0 = NaN): there the loss must be NaN and every value the
reference has finite must agree.
"""

import importlib.util
import json
import math
import os
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ beside bench/learner's scripts, which are loaded by path
sys.path.insert(0, HERE)
import srpo_loss as L  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CASES_FILE = os.path.join(HERE, "fixtures", "srpo-reference-cases.json")
# Float32 values computed in another order (segment sums, exp): |got - want| <= TOL * (1 + |want|).
TOL = 2e-6


def load_cases():
    with open(CASES_FILE, encoding="utf-8") as f:
        return json.load(f)["cases"]


def floats(values):
    """JSON floats to Python floats: numbers and "NaN", "Infinity", "-Infinity" (which float() reads)."""
    return [float(v) for v in values]


def tensor2d(rows):
    return torch.tensor([floats(r) for r in rows], dtype=torch.float32)


def flat(x):
    if isinstance(x, torch.Tensor):
        return x.detach().double().flatten().tolist()
    return [v for row in x for v in floats(row)] if x and isinstance(x[0], list) else floats(x)


def batch(case):
    return {
        "logp_old": tensor2d(case["logpOld"]),
        "mask": tensor2d(case["mask"]),
        "member_set": torch.tensor(case["memberSet"], dtype=torch.long),
        "advantage": torch.tensor(floats(case["advantage"]), dtype=torch.float32),
    }


def finite_inputs(case):
    return all(math.isfinite(v) for v in flat(case["logpOld"]) + flat(case["logpNew"]))


class Agreement:
    """Assertions shared by the test classes (a mixin, so unittest does not run it on its own)."""

    def assert_close(self, got, want, what, nan_loss=False):
        got, want = flat(got), flat(want)
        self.assertEqual(len(got), len(want), what)
        for i, (g, w) in enumerate(zip(got, want)):
            if math.isnan(w):
                if not nan_loss:
                    self.assertTrue(math.isnan(g), f"{what}[{i}] = {g}, reference NaN")
                continue
            self.assertFalse(math.isnan(g), f"{what}[{i}] is NaN, reference {w}")
            if math.isinf(w):
                self.assertEqual(g, w, f"{what}[{i}]")
                continue
            self.assertLessEqual(abs(g - w), TOL * (1 + abs(w)), f"{what}[{i}] = {g}, reference {w}")

    def loss_and_grad(self, case, loss_fn):
        """loss_fn(logp_new leaf) -> loss; the loss and d loss / d logp_new."""
        logp_new = tensor2d(case["logpNew"]).requires_grad_(True)
        loss = loss_fn(logp_new)
        loss.backward()
        return loss, logp_new.grad


class SrpoLossAgainstReference(Agreement, unittest.TestCase):
    def test_every_case_gives_the_reference_loss_set_ratios_and_gradient(self):
        cases = load_cases()
        self.assertGreaterEqual(len(cases), 10)
        for case in cases:
            with self.subTest(case=case["name"]):
                self.assertEqual(case["config"]["objective"], "srpo")
                b = batch(case)
                out = {}

                def loss_fn(logp_new):
                    out.update(L.srpo_objective(logp_new, b, case["config"]))
                    return out["loss"]

                loss, grad = self.loss_and_grad(case, loss_fn)
                want = case["expected"]
                nan_loss = want["loss"] == "NaN"
                self.assert_close(loss, [want["loss"]], "loss")
                self.assert_close(out["log_rho"], want["logRatio"], "logRatio", nan_loss)
                self.assert_close(out["k"], want["setSize"], "setSize")
                self.assert_close(grad, want["grad"], "grad", nan_loss)

    def test_diagnostics_count_the_reference_clips_and_out_of_range_sets(self):
        for case in load_cases():
            if case["expected"]["loss"] == "NaN":
                continue
            with self.subTest(case=case["name"]):
                b = batch(case)
                with torch.no_grad():
                    out = L.srpo_objective(tensor2d(case["logpNew"]), b, case["config"])
                d = L.diagnostics(out, b, case["config"])
                want = case["expected"]
                s = len(want["clippedLow"])
                self.assertAlmostEqual(d["losses/clip_frac_low"], sum(want["clippedLow"]) / s, delta=1e-12)
                self.assertAlmostEqual(d["losses/clip_frac_high"], sum(want["clippedHigh"]) / s, delta=1e-12)
                self.assertAlmostEqual(d["losses/clip_frac_dual"], sum(want["clippedDual"]) / s, delta=1e-12)
                self.assertEqual(d["ratio/out_of_range"], float(sum(want["outOfRange"])))


def load_bench(name):
    path = os.path.join(REPO, "bench", "learner", name)
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BenchTwinsAgainstReference(Agreement, unittest.TestCase):
    def covered(self, dual_clip):
        """The cases the bench's unbounded formula covers (see the module docstring)."""
        out = []
        for case in load_cases():
            want = case["expected"]
            if not finite_inputs(case) or any(want["outOfRange"]):
                continue
            if not dual_clip and case["config"]["dualClip"] and any(want["clippedDual"]):
                continue
            out.append(case)
        return out

    def check(self, module, dual_clip):
        cases = self.covered(dual_clip)
        self.assertGreaterEqual(len(cases), 4)
        self.assertTrue(any(any(c["expected"]["clippedLow"]) for c in cases) and any(any(c["expected"]["clippedHigh"]) for c in cases))
        for case in cases:
            with self.subTest(case=case["name"]):
                cfg = case["config"]
                b = batch(case)
                red = module.reduction_factor(b["member_set"], len(case["advantage"]), cfg["eventReduction"])
                extra = (cfg["clipRatioC"] if cfg["dualClip"] else None,) if dual_clip else ()

                def loss_fn(logp_new):
                    # As the step forms logp_new: torch_learner.py multiplies the gathered log-probs by the mask.
                    x = logp_new * b["mask"] if not dual_clip else logp_new
                    loss, _ = module.srpo_set_loss(x, b["logp_old"], b["mask"], b["member_set"], b["advantage"], red, cfg["clipLow"], cfg["clipHigh"], *extra)
                    return loss

                loss, grad = self.loss_and_grad(case, loss_fn)
                self.assert_close(loss, [case["expected"]["loss"]], "loss")
                self.assert_close(grad, case["expected"]["grad"], "grad")

    def test_torch_learner_loss(self):
        self.check(load_bench("torch_learner.py"), dual_clip=False)

    def test_torch_hf_learner_loss(self):
        self.check(load_bench("torch_hf_learner.py"), dual_clip=True)


if __name__ == "__main__":
    unittest.main()
