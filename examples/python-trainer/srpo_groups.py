"""A group without its erased sets, renormalized as the group stage would have made it (docs/erasure.md).

A faithful port of:

- ``groupAdvantages``, ``groupMean``, ``groupStd`` (libs/srpo/src/advantages.ts): float64 on the
  host, per ``groupKey``, ``A = (R - mean) / (std + eps)``, a group of one set or of equal values
  degenerate (every A = 0), the ProGPO progress fallback;
- ``resolveObjectiveConfig`` for the advantage fields (libs/srpo/src/config.ts): a group's recorded
  ``objectiveConfig`` with the defaults filled in and unknown keys refused;
- ``groupValues`` and ``groupWithout`` (libs/materializer/src/group-values.ts): the sets left, their
  advantages, the reward statistics and the objective re-serialized as ``JSON.stringify`` writes it.

Same operations in the same order in IEEE double, so the advantages the ledger records are the
learner's to the bit.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any, Dict, List, Optional, Set

ADVANTAGE_STDS = ("sample", "population")
TOP_KEYS = ("objective", "eventReduction", "clipLow", "clipHigh", "dualClip", "clipRatioC", "advantageStd", "advantageEps", "progress")
PROGRESS_KEYS = ("enabled", "rewardThreshold", "stdThreshold")
DEFAULT_PROGRESS = {"enabled": False, "rewardThreshold": 0.001, "stdThreshold": 0.0001}


class GroupValueError(ValueError):
    """A group the group stage could not have made (bad objectiveConfig, non-finite reward, duplicate set)."""


def _finite(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise GroupValueError(f"{field}: expected a finite number, got {v!r}")
    return float(v)


def resolve_advantage_config(partial: Any, path: str = "objectiveConfig") -> Dict[str, Any]:
    """The advantage fields of ``resolveObjectiveConfig(partial)``: advantageStd, advantageEps, progress."""
    if partial is None:
        return {"advantageStd": "sample", "advantageEps": 1e-6, "progress": dict(DEFAULT_PROGRESS)}
    if not isinstance(partial, dict):
        raise GroupValueError(f"{path}: expected an object, got {partial!r}")
    unknown = [k for k in partial if k not in TOP_KEYS]
    if unknown:
        raise GroupValueError(f"{path}.{unknown[0]}: unknown key")
    progress = dict(DEFAULT_PROGRESS)
    if "progress" in partial:  # present (JSON has no undefined): null is refused, as in TypeScript
        p = partial["progress"]
        if not isinstance(p, dict):
            raise GroupValueError(f"{path}.progress: expected an object, got {p!r}")
        bad = [k for k in p if k not in PROGRESS_KEYS]
        if bad:
            raise GroupValueError(f"{path}.progress.{bad[0]}: unknown key")
        if "enabled" in p:
            if not isinstance(p["enabled"], bool):
                raise GroupValueError(f"{path}.progress.enabled: expected a boolean")
            progress["enabled"] = p["enabled"]
        if "rewardThreshold" in p:
            progress["rewardThreshold"] = _finite(p["rewardThreshold"], f"{path}.progress.rewardThreshold")
        if "stdThreshold" in p:
            progress["stdThreshold"] = _finite(p["stdThreshold"], f"{path}.progress.stdThreshold")
            if progress["stdThreshold"] < 0:
                raise GroupValueError(f"{path}.progress.stdThreshold: must be >= 0")
    std = partial.get("advantageStd", "sample")
    if not isinstance(std, str) or std not in ADVANTAGE_STDS:
        raise GroupValueError(f"{path}.advantageStd: expected one of {', '.join(ADVANTAGE_STDS)}, got {std!r}")
    eps = 1e-6 if "advantageEps" not in partial else _finite(partial["advantageEps"], f"{path}.advantageEps")
    if eps < 0:
        raise GroupValueError(f"{path}.advantageEps: must be >= 0, got {eps}")
    return {"advantageStd": std, "advantageEps": eps, "progress": progress}


def group_mean(values: List[float]) -> float:
    s = 0.0
    for v in values:  # left to right, as the TypeScript loop (Python 3.12's sum() compensates)
        s += v
    return s / len(values) if values else math.nan


def group_std(values: List[float], kind: str) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mu = group_mean(values)
    squares = 0.0
    for v in values:
        squares += (v - mu) * (v - mu)
    return math.sqrt(squares / (n - 1 if kind == "sample" else n))


def _all_equal(values: List[float]) -> bool:
    return all(v == values[0] for v in values)


def _progress_fallback_applies(group: List[Dict[str, Any]], cfg: Dict[str, Any]) -> bool:
    p = cfg["progress"]
    if not p["enabled"]:
        return False
    if not all(s["reward"] < p["rewardThreshold"] for s in group):
        return False
    if not all(s.get("progress") is not None for s in group):
        return False
    progress = [s["progress"] for s in group]
    return not _all_equal(progress) and group_std(progress, cfg["advantageStd"]) >= p["stdThreshold"]


def group_advantages(sets: List[Dict[str, Any]], cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """``groupAdvantages``: one result per input ``{setId, groupKey, reward, progress?}``, in input order."""
    groups: Dict[str, List[int]] = {}
    seen: Set[str] = set()
    for i, s in enumerate(sets):
        if not isinstance(s.get("setId"), str) or not s["setId"]:
            raise GroupValueError(f"sets[{i}].setId: expected a non-empty string")
        if s["setId"] in seen:
            raise GroupValueError(f"sets[{i}].setId: duplicate set {s['setId']}")
        seen.add(s["setId"])
        if not isinstance(s.get("groupKey"), str) or not s["groupKey"]:
            raise GroupValueError(f"sets[{i}].groupKey: expected a non-empty string")
        _finite(s["reward"], f"sets[{i}].reward")
        if s.get("progress") is not None:
            _finite(s["progress"], f"sets[{i}].progress")
        groups.setdefault(s["groupKey"], []).append(i)
    results: List[Optional[Dict[str, Any]]] = [None] * len(sets)
    for group_key, indices in groups.items():
        use_progress = len(indices) > 1 and _progress_fallback_applies([sets[i] for i in indices], cfg)
        values = [float(sets[i]["progress"] if use_progress else sets[i]["reward"]) for i in indices]
        degenerate = len(indices) < 2 or _all_equal(values)
        mu = group_mean(values)
        sigma = group_std(values, cfg["advantageStd"])
        for k, i in enumerate(indices):
            results[i] = {"setId": sets[i]["setId"], "groupKey": group_key,
                          "advantage": 0.0 if degenerate else (values[k] - mu) / (sigma + cfg["advantageEps"]),
                          "fromProgress": use_progress, "degenerateGroup": degenerate}
    return results  # type: ignore[return-value]


def js_number(x: float) -> str:
    """``String(x)`` of a JavaScript number (ECMAScript Number::toString): 1e-6 is ``0.000001``, 1e-7 ``1e-7``."""
    if isinstance(x, bool):
        raise TypeError("not a number")
    x = float(x)
    if not math.isfinite(x):
        return "null"  # what JSON.stringify writes
    if x == 0:
        return "0"
    if x < 0:
        return "-" + js_number(-x)
    t = Decimal(repr(x)).normalize().as_tuple()  # repr is the shortest round-trip digits, as JavaScript's
    digits = "".join(map(str, t.digits))
    k = len(digits)
    n = t.exponent + k  # x = 0.digits * 10^n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    mant = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mant}e{'+' if e >= 0 else '-'}{abs(e)}"


def js_json(v: Any) -> str:
    """``JSON.stringify(v)`` for the objects group_values serializes (dicts in insertion order, str, bool, numbers)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return js_number(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{js_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(js_json(x) for x in v) + "]"
    raise TypeError(f"cannot serialize {type(v).__name__}")


def group_values(sets: List[Dict[str, Any]], cfg: Dict[str, Any]) -> Dict[str, Any]:
    """``groupValues``: ``sets`` are ``{set, source}``; the group fields the group stage computes over them."""
    inputs = []
    for gs in sets:
        s = gs["set"]
        inputs.append({"setId": s["setId"], "groupKey": s["groupKey"], "reward": s["reward"],
                       **({"progress": s["progress"]} if s.get("progress") is not None else {})})
    results = group_advantages(inputs, cfg)
    from_progress = any(r["fromProgress"] for r in results)
    values = [float(gs["set"]["progress"] if from_progress else gs["set"]["reward"]) for gs in sets]
    return {
        "sets": [{"set": gs["set"], "advantage": r["advantage"], "advantageFromProgress": r["fromProgress"], "setSource": gs["source"]}
                 for gs, r in zip(sets, results)],
        "rewardMean": group_mean(values),
        "rewardStd": group_std(values, cfg["advantageStd"]),
        "degenerate": results[0]["degenerateGroup"] if results else True,
        "objectiveConfig": js_json({"advantageStd": cfg["advantageStd"], "advantageEps": cfg["advantageEps"], "progress": cfg["progress"]}),
        "eventTimeMs": max(gs["set"]["eventTimeMs"] for gs in sets),
    }


def group_without(group: Dict[str, Any], set_ids: Set[str]) -> Optional[Dict[str, Any]]:
    """``groupWithout``: ``group`` without the sets in ``set_ids``, renormalized under its own recorded
    objective; the same group when none is left out, None when no set is left. The group keeps its id."""
    kept = [gs for gs in group["sets"] if gs["set"]["setId"] not in set_ids]
    if len(kept) == len(group["sets"]):
        return group
    if not kept:
        return None
    try:
        recorded = json.loads(group["objectiveConfig"])
    except ValueError as e:
        raise GroupValueError(f"objectiveConfig is not JSON ({e})") from None
    cfg = resolve_advantage_config(recorded)
    return {**group, **group_values([{"set": gs["set"], "source": gs["setSource"]} for gs in kept], cfg)}
