"""groupWithout in Python, checked by hand:  python3 -m unittest examples/python-trainer/test_srpo_groups.py

- rewards [1, 0, 1, 0] (sample std, eps 1e-6) without the second set: rewards [1, 1, 0], mean 2/3,
  std sqrt(((1/3)^2 + (1/3)^2 + (2/3)^2) / 2) = sqrt(1/3) = s, advantages (1/3)/(s+eps) for the
  two 1s (0.57734926919135781..., in 40-digit decimal arithmetic) and -2 times that for the 0; with the population std, sqrt(2/9);
- one set left: degenerate, advantage 0, std 0; none left: None; none erased: the same group;
- the progress fallback (every reward 0, progress enabled) renormalizes the progress values;
- the objective re-serialized as JavaScript's JSON.stringify writes it (1e-6 as 0.000001);
- a recorded objectiveConfig resolveObjectiveConfig refuses is refused.
"""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import srpo_groups as G  # noqa: E402

EPS = 1e-6
S3 = 0.5773502691896257  # sqrt(1/3), by hand: 0.57735026918962576...


def gset(i, reward, progress=None, t=100):
    return {"set": {"setId": f"s{i}", "groupKey": "task-1/solve", "reward": reward, "progress": progress, "eventTimeMs": t + i},
            "advantage": 99.0, "advantageFromProgress": False, "setSource": {"topic": "srpo.active-sets", "partition": 0, "offset": 10 + i}}


def group(rewards, config='{"advantageStd":"sample","advantageEps":1e-6}', progress=None):
    return {"groupId": "g1", "groupKey": "task-1/solve", "policyId": "solver", "closeReason": "SIZE", "expectedSize": len(rewards),
            "sets": [gset(i, r, None if progress is None else progress[i]) for i, r in enumerate(rewards)],
            "rewardMean": 0.5, "rewardStd": 1.0, "degenerate": False, "objectiveConfig": config, "eventTimeMs": 7}


class GroupWithout(unittest.TestCase):
    def test_rewards_1010_minus_one_set_by_hand(self):
        g = G.group_without(group([1.0, 0.0, 1.0, 0.0]), {"s1"})
        self.assertEqual([gs["set"]["setId"] for gs in g["sets"]], ["s0", "s2", "s3"])
        a1 = 0.5773492691913578  # (1/3)/(S3 + EPS), in 40-digit decimal: 0.57734926919135781231...
        for got, want in zip([gs["advantage"] for gs in g["sets"]], [a1, a1, -2 * a1]):
            self.assertAlmostEqual(got, want, places=12)
        self.assertAlmostEqual(g["rewardMean"], 2 / 3, places=15)
        self.assertAlmostEqual(g["rewardStd"], S3, places=15)
        self.assertFalse(g["degenerate"])
        self.assertEqual([gs["advantageFromProgress"] for gs in g["sets"]], [False] * 3)
        self.assertEqual([gs["setSource"]["offset"] for gs in g["sets"]], [10, 12, 13])
        self.assertEqual(g["eventTimeMs"], 103)  # the latest set left
        self.assertEqual((g["groupId"], g["closeReason"], g["expectedSize"]), ("g1", "SIZE", 4))  # kept
        # JSON.stringify({advantageStd, advantageEps, progress}) of the resolved config, as node writes it.
        self.assertEqual(g["objectiveConfig"],
                         '{"advantageStd":"sample","advantageEps":0.000001,"progress":{"enabled":false,"rewardThreshold":0.001,"stdThreshold":0.0001}}')

    def test_population_std(self):
        g = G.group_without(group([1.0, 0.0, 1.0, 0.0], '{"advantageStd":"population","advantageEps":0}'), {"s1"})
        sd = math.sqrt(2 / 9)  # 0.4714045207910317
        self.assertAlmostEqual(sd, 0.4714045207910317, places=15)
        for got, want in zip([gs["advantage"] for gs in g["sets"]], [(1 / 3) / sd, (1 / 3) / sd, (-2 / 3) / sd]):
            self.assertAlmostEqual(got, want, places=12)
        self.assertAlmostEqual(g["sets"][0]["advantage"], 0.7071067811865476, places=12)  # 1/sqrt(2)
        self.assertIn('"advantageStd":"population","advantageEps":0,', g["objectiveConfig"])

    def test_one_none_or_all_left(self):
        one = G.group_without(group([1.0, 0.0, 1.0]), {"s0", "s1"})
        self.assertEqual([(gs["set"]["setId"], gs["advantage"]) for gs in one["sets"]], [("s2", 0.0)])
        self.assertTrue(one["degenerate"])
        self.assertEqual((one["rewardMean"], one["rewardStd"]), (1.0, 0.0))
        equal = G.group_without(group([1.0, 0.0, 1.0]), {"s1"})  # equal values left: degenerate too
        self.assertEqual([gs["advantage"] for gs in equal["sets"]], [0.0, 0.0])
        self.assertTrue(equal["degenerate"])
        self.assertIsNone(G.group_without(group([1.0, 0.0]), {"s0", "s1"}))
        g = group([1.0, 0.0])
        self.assertIs(G.group_without(g, {"other"}), g)
        self.assertIs(G.group_without(g, set()), g)

    def test_progress_fallback(self):
        cfg = '{"advantageStd":"sample","advantageEps":1e-6,"progress":{"enabled":true}}'
        g = G.group_without(group([0.0, 0.0, 0.0, 0.0], cfg, progress=[0.2, 0.5, 0.9, 0.1]), {"s1"})
        # progress left [0.2, 0.9, 0.1]: mean 0.4, squares 0.04 + 0.25 + 0.09 = 0.38, std sqrt(0.19)
        sd = math.sqrt(0.19)
        for got, want in zip([gs["advantage"] for gs in g["sets"]], [-0.2 / (sd + EPS), 0.5 / (sd + EPS), -0.3 / (sd + EPS)]):
            self.assertAlmostEqual(got, want, places=9)
        self.assertEqual([gs["advantageFromProgress"] for gs in g["sets"]], [True] * 3)
        self.assertAlmostEqual(g["rewardMean"], 0.4, places=12)
        self.assertIn('"progress":{"enabled":true,"rewardThreshold":0.001,"stdThreshold":0.0001}', g["objectiveConfig"])

    def test_refuses_what_resolve_objective_config_refuses(self):
        for cfg in ['{"advantageStd":"median"}', '{"advantageStd":null}', '{"advantageEps":-1}', '{"typo":1}',
                    '{"progress":{"enabled":"yes"}}', '{"progress":null}', "not json"]:
            with self.subTest(cfg):
                with self.assertRaises(G.GroupValueError):
                    G.group_without(group([1.0, 0.0], cfg), {"s0"})

    def test_js_number(self):
        for x, s in [(1e-6, "0.000001"), (1e-7, "1e-7"), (100.0, "100"), (1e21, "1e+21"), (0.1 + 0.2, "0.30000000000000004"), (-2.5e-8, "-2.5e-8")]:
            self.assertEqual(G.js_number(x), s)


if __name__ == "__main__":
    unittest.main()
