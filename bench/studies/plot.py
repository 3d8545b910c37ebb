#!/usr/bin/env python3
"""Charts of the studies (issue #20), drawn from their results JSON.

    python3 bench/studies/plot.py srpo bench/studies/srpo/results/srpo-study.json docs/studies
    python3 bench/studies/plot.py progpo bench/studies/progpo/results/progpo-study.json docs/studies
    python3 bench/studies/plot.py agentbrew bench/studies/agentbrew/results/agentbrew-study.json docs/studies

Needs matplotlib (pip install matplotlib). Intervals are Student-t 95 % over seeds, as in
the studies' tables (bench/studies/stats.ts).
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# t_{0.975, df} for df = 1..30, as in bench/studies/stats.ts.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131,
        2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df):
    return T975[df - 1] if df <= 30 else 2.042 if df <= 40 else 2.021 if df <= 60 else 2.0 if df <= 120 else 1.96


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return m, t975(n - 1) * s / math.sqrt(n)


def blocks(xs, size):
    return [sum(xs[i:i + size]) / len(xs[i:i + size]) for i in range(0, len(xs), size)]


def srpo(data, out):
    results = data["results"]
    best = {b["objective"]: b["lr"] for b in data["summary"]["best"]}
    objectives = list(best.keys())
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    block = 5

    # 1. Learning curves at each objective's best learning rate, with 95 % bands over seeds.
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    for i, o in enumerate(objectives):
        runs = sorted((r for r in results if r["objective"] == o and r["lr"] == best[o]), key=lambda r: r["seed"])
        curves = [blocks(r["curve"], block) for r in runs]
        points = len(curves[0])
        x = [(j + 0.5) * block for j in range(points)]
        stats = [mean_ci([c[j] for c in curves]) for j in range(points)]
        m = [100 * s[0] for s in stats]
        h = [100 * (s[1] if not math.isnan(s[1]) else 0) for s in stats]
        ax.plot(x, m, label=f"{o} (lr {best[o]:g})", color=colours[i % len(colours)])
        ax.fill_between(x, [a - b for a, b in zip(m, h)], [a + b for a, b in zip(m, h)], color=colours[i % len(colours)], alpha=0.15)
    ax.set_xlabel("update")
    ax.set_ylabel(f"work sets right, % (mean of {block}-update blocks)")
    ax.set_title(f"SRPO study: training curves at each objective's best lr ({len(curves)} seeds, 95 % bands)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "srpo-curves.png"))
    plt.close(fig)

    # 2. Final success against the learning rate.
    lrs = sorted({r["lr"] for r in results})
    fig, ax = plt.subplots(figsize=(8, 4.4), dpi=120)
    for i, o in enumerate(objectives):
        ms, hs = [], []
        for lr in lrs:
            xs = [r["finalSuccess"] for r in results if r["objective"] == o and r["lr"] == lr]
            m, h = mean_ci(xs)
            ms.append(100 * m)
            hs.append(100 * (h if not math.isnan(h) else 0))
        shift = [lr * (1 + 0.04 * (i - len(objectives) / 2)) for lr in lrs]
        ax.errorbar(shift, ms, yerr=hs, marker="o", capsize=3, label=o, color=colours[i % len(colours)])
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final work sets right, %")
    ax.set_ylim(0, 100)
    ax.set_title("SRPO study: final success by learning rate (95 % intervals)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "srpo-lr.png"))
    plt.close(fig)

    # 3. Diagnostics per K at the best learning rates.
    per_k = {b["objective"]: b["perK"] for b in data["summary"]["best"]}
    ks = sorted({int(k) for p in per_k.values() for k in p})
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), dpi=120)
    width = 0.8 / len(objectives)
    for i, o in enumerate(objectives):
        xs = [k + (i - (len(objectives) - 1) / 2) * width for k in ks]
        get = lambda key, scale=1.0: [scale * per_k[o][str(k)][key] if str(k) in per_k[o] and per_k[o][str(k)][key] is not None else float("nan") for k in ks]
        axes[0].bar(xs, get("clipFrac", 100), width, label=o, color=colours[i % len(colours)])
        axes[1].bar(xs, get("logRatioStd"), width, color=colours[i % len(colours)])
        axes[2].bar(xs, get("gradNormVariance"), width, color=colours[i % len(colours)])
    axes[0].set_title("clip fraction, %")
    axes[1].set_title("std of the joint log-ratio Σℓ")
    axes[2].set_title("grad-norm variance (probe)")
    axes[2].set_yscale("log")
    for a in axes:
        a.set_xticks(ks)
        a.set_xlabel("set size K")
        a.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    fig.suptitle("SRPO study: worker-policy diagnostics per K at each objective's best lr")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "srpo-per-k.png"))
    plt.close(fig)
    return ["srpo-curves.png", "srpo-lr.png", "srpo-per-k.png"]


def progpo(data, out):
    results = data["results"]
    block = data["block"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120)
    for name, on, colour in (("fallback off", False, "tab:blue"), ("fallback on", True, "tab:orange")):
        runs = sorted((r for r in results if r["fallback"] == on), key=lambda r: r["seed"])
        for key, axis in (("curve", ax), ("usedFallback", bx)):
            if key == "usedFallback" and not on:
                continue
            curves = [blocks(r[key], block) for r in runs]
            points = len(curves[0])
            x = [(j + 0.5) * block for j in range(points)]
            stats = [mean_ci([c[j] for c in curves]) for j in range(points)]
            m = [100 * s[0] for s in stats]
            h = [100 * (s[1] if not math.isnan(s[1]) else 0) for s in stats]
            axis.plot(x, m, label=name, color=colour)
            axis.fill_between(x, [a - b for a, b in zip(m, h)], [a + b for a, b in zip(m, h)], color=colour, alpha=0.2)
        fails = [blocks(r["allFailed"], block) for r in runs]
        x = [(j + 0.5) * block for j in range(len(fails[0]))]
        bx.plot(x, [100 * mean_ci([f[j] for f in fails])[0] for j in range(len(fails[0]))], linestyle="--", color=colour, label=f"groups all failed ({name})")
    ax.set_title(f"ProGPO study: training success ({len(runs)} seeds, 95 % bands)")
    ax.set_xlabel("update")
    ax.set_ylabel(f"episodes right, % ({block}-update blocks)")
    bx.set_title("groups that failed entirely / used the fallback")
    bx.set_xlabel("update")
    bx.set_ylabel("% of groups")
    ax.set_ylim(0, None)  # success stays low on these tasks: let the axis follow it
    bx.set_ylim(0, 100)
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "progpo-curves.png"))
    plt.close(fig)
    return ["progpo-curves.png"]


def agentbrew(data, out):
    results = sorted(data["results"], key=lambda r: r["seed"])
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=120)
    colours = {"effective": "tab:green", "redundant": "tab:orange", "erroneous": "tab:red"}
    pooled = {k: [x for r in results for x in r["credits"][k]] for k in colours}
    lo = min(min(v) for v in pooled.values() if v)
    hi = max(max(v) for v in pooled.values() if v)
    bins = [lo + (hi - lo) * i / 40 for i in range(41)]
    for k, xs in pooled.items():
        if xs:
            ax.hist(xs, bins=bins, alpha=0.5, density=True, label=f"{k} ({len(xs)})", color=colours[k])
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_title("AgentBrew study: PMI credits of logged calls by kind")
    ax.set_xlabel("credit (nats per instruction token)")
    ax.set_ylabel("density")
    ax.legend(fontsize=8)
    methods = [m["method"] for m in results[0]["methods"]]
    ms, hs = [], []
    for m in methods:
        xs = [next(x["success"] for x in r["methods"] if x["method"] == m) for r in results]
        mu, h = mean_ci(xs)
        ms.append(100 * mu)
        hs.append(100 * (h if not math.isnan(h) else 0))
    bx.bar(range(len(methods)), ms, yerr=hs, capsize=4, color="tab:blue")
    bx.set_xticks(range(len(methods)))
    bx.set_xticklabels(methods, rotation=25, ha="right", fontsize=8)
    bx.set_ylabel("success on fresh tasks, %")
    bx.set_ylim(0, 100)
    bx.set_title(f"trained from the logs ({len(results)} seeds, 95 % intervals)")
    bx.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "agentbrew.png"))
    plt.close(fig)
    return ["agentbrew.png"]


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("srpo", "progpo", "agentbrew"):
        sys.exit("usage: plot.py srpo|progpo|agentbrew RESULTS.json OUT_DIR")
    with open(sys.argv[2]) as f:
        data = json.load(f)
    os.makedirs(sys.argv[3], exist_ok=True)
    files = {"srpo": srpo, "progpo": progpo, "agentbrew": agentbrew}[sys.argv[1]](data, sys.argv[3])
    print("charts: " + ", ".join(os.path.join(sys.argv[3], f) for f in files))


if __name__ == "__main__":
    main()
