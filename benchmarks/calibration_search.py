"""Calibration of a search's confirmation: how often a winner chosen on noise alone is "confirmed".

Every candidate of a simulated search has the same true performance as the reference. Exploration
launches each candidate and the reference a few times (the noise of `benchmarks/calibration.py`:
launch offsets N(0, 0.006^2), a slow launch with probability 0.03 at x1/1.08, 3 measured requests
after 1 warm-up with N(0, 0.004^2) jitter, plus N(0, 0.04^2) accept-length jitter per request under
EAGLE noise), and the winner is the candidate with the highest geometric mean of launch-mean
decode tok/s. The confirmation then runs the winner and the reference on FRESH launches (the fixed
design of 5 launches per condition) and decides the registered prediction "the winner beats the
reference by at least min_effect" with the framework's own analysis (`analysis.verdicts.analyze`, an
`increase` prediction: Welch, one-sided level alpha, the lower bound above 1 + min_effect), exactly
as a confirmatory run decides it. Every "supported" is a false confirmation.

Printed per noise and min_effect: the false-confirmation rate with its Clopper-Pearson 95% interval;
beside it the rate of the same test on the exploration launches that chose the winner (what reusing
them would give); and the winner's exploration estimate against the reference, naive and
selection-corrected (`stats.selection.winner_estimate`, Andrews, Kitagawa & McCloskey 2019), with
their bias, median and the coverage of their 90% intervals (the truth is a ratio of 1).

    python benchmarks/calibration_search.py            # 2000 searches per noise (about 3 minutes, 1 core)
    python benchmarks/calibration_search.py --quick    # 200 per noise

Seeded: search r of noise n draws from numpy's default_rng([seed, n, r]). Nothing here is tuned to
the outcome: the seed, the counts and the noise model were fixed before the first run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import calibration as cal  # noqa: E402

from framework.analysis.verdicts import analyze  # noqa: E402
from framework.core.spec import Hypothesis  # noqa: E402
from framework.stats.effects import launch_means  # noqa: E402
from framework.stats.selection import winner_estimate  # noqa: E402

SEED = 20261201
ALPHA = cal.ALPHA
CANDIDATES = 8
EXPLORE_LAUNCHES = 3
CONFIRM_LAUNCHES = cal.FIXED_LAUNCHES
MIN_EFFECTS = (0.0, 0.05)
NOISES = (("baseline noise", False), ("EAGLE noise", True))
METRIC = "decode_tok_s"
# the selection corrections compared (stats.selection.winner_estimate): the default first
CORRECTIONS = {"hybrid, separate": ("hybrid", "separate"), "hybrid, pooled": ("hybrid", "pooled"),
               "conditional, separate": ("conditional", "separate"), "conditional, pooled": ("conditional", "pooled")}


def _explore_hypothesis(k: int) -> Hypothesis:
    """One factor: the reference and k candidates, all with the same truth (only its conditions are used)."""
    levels = {"ref": {}, **{f"k{i}": {} for i in range(k)}}
    return Hypothesis.model_validate({
        "name": "search_calib", "statement": "exploration", "experiment": "none",
        "factors": {"x": {"reference": "ref", "levels": levels}},
        "predictions": [{"id": "p", "kind": "increase", "factor": "x", "level": "k0", "min_effect": 0.0}],
        "design": {"launches": EXPLORE_LAUNCHES, "requests": cal.REQUESTS, "warmup": cal.WARMUP, "alpha": ALPHA,
                   "seed": 1},
    })


def _confirm_hypothesis(min_effect: float) -> Hypothesis:
    """The registered confirmation: level b (the winner) beats a (the reference) by at least min_effect."""
    return cal._two_cell({"kind": "increase", "min_effect": min_effect})


def _by_launch(rows: list[dict[str, Any]]) -> dict[int, list[float]]:
    """Condition index -> per-launch means of the metric over measured requests (the launch is the unit)."""
    values: dict[int, dict[str, list[float]]] = {}
    for r in rows:
        if r["kind"] == "request" and not r["warmup"] and r["ok"]:
            values.setdefault(r["condition"], {}).setdefault(r["launch_id"], []).append(r[METRIC])
    return {c: list(launch_means(v).values()) for c, v in values.items()}


def _as_two_cell(rows: list[dict[str, Any]], ref: int, winner: int) -> list[dict[str, Any]]:
    """The exploration rows of the reference and the winner, relabelled as conditions a (0) and b (1)."""
    out = []
    for r in rows:
        if r["condition"] in (ref, winner):
            new = 0 if r["condition"] == ref else 1
            out.append({**r, "condition": new, "levels": {"x": "a" if new == 0 else "b"}})
    return out


def one_search(args: tuple) -> dict[str, Any]:
    seed, noise_index, eagle, run, k = args
    rng = np.random.default_rng([seed, noise_index, run])
    h = _explore_hypothesis(k)
    idx = [c.index for c in cal.conditions(h)]
    rows = cal.simulate_rows(h, {i: 1.0 for i in idx}, tuple(idx) if eagle else (), EXPLORE_LAUNCHES, rng)
    means = _by_launch(rows)
    ref = next(c.index for c in cal.conditions(h) if c.levels["x"] == "ref")
    cands = {f"c{c}": means[c] for c in idx if c != ref}
    w = winner_estimate(cands, means[ref], "max", ALPHA)
    winner = int(w.winner[1:])
    variants = {name: winner_estimate(cands, means[ref], "max", ALPHA, method=m, variance=v)
                for name, (m, v) in CORRECTIONS.items()}
    fresh = cal.simulate_rows(_confirm_hypothesis(0.0), {0: 1.0, 1: 1.0}, (0, 1) if eagle else (), CONFIRM_LAUNCHES,
                              rng)
    reused = _as_two_cell(rows, ref, winner)
    out: dict[str, Any] = {"naive": math.log(w.naive), "naive_covers": w.naive_ci[0] <= 1.0 <= w.naive_ci[1]}
    for name, v in variants.items():
        out[name] = math.log(v.corrected) if v.corrected > 0 else -math.inf
        out[f"{name}_covers"] = v.corrected_ci[0] <= 1.0 <= v.corrected_ci[1]
    for e in MIN_EFFECTS:
        h2 = _confirm_hypothesis(e)
        out[f"fresh_{e}"] = analyze(h2, fresh).predictions[0].verdict == "supported"
        out[f"reused_{e}"] = analyze(h2, reused).predictions[0].verdict == "supported"
    return out


def clopper_pearson(x: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(x, n, alpha=1 - level, method="beta")
    return float(lo), float(hi)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 searches per noise: a smoke run, wide intervals")
    ap.add_argument("--runs", type=int, default=None, help="searches per noise (default 2000, quick 200)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--candidates", type=int, default=CANDIDATES)
    ap.add_argument("--workers", type=int, default=1 if (os.cpu_count() or 1) <= 2 else 2)
    args = ap.parse_args(argv)
    runs = args.runs or (200 if args.quick else 2000)
    t0 = time.time()
    print(f"search calibration: {args.candidates} candidates + the reference, all with the same true performance; "
          f"exploration {EXPLORE_LAUNCHES} launches each, winner = highest geometric mean of launch-mean {METRIC}; "
          f"confirmation on fresh launches, {CONFIRM_LAUNCHES} per condition, analysis.verdicts.analyze "
          f"(increase, welch), alpha={ALPHA} one-sided; noise of benchmarks/calibration.py (launch sd {cal.SD_LAUNCH}, "
          f"request sd {cal.SD_REQUEST}, accept-length sd {cal.SD_ACCEPT} under EAGLE noise, slow launch "
          f"p={cal.SLOW_PROB} x{1 / cal.SLOW_FACTOR:.3f}, {cal.REQUESTS} requests + {cal.WARMUP} warm-up); seed "
          f"{args.seed} (search r of noise n: default_rng([seed, n, r])); {runs} searches per noise; "
          f"{args.workers} worker(s)\n")
    checks: list[tuple[str, bool, str]] = []
    for n_index, (noise, eagle) in enumerate(NOISES):
        jobs = [(args.seed, n_index, eagle, r, args.candidates) for r in range(runs)]
        if args.workers > 1:
            with ProcessPoolExecutor(max_workers=args.workers) as pool:
                res = list(pool.map(one_search, jobs, chunksize=max(1, runs // (8 * args.workers))))
        else:
            res = [one_search(j) for j in jobs]
        print(f"{noise}:")
        for e in MIN_EFFECTS:
            x = sum(r[f"fresh_{e}"] for r in res)
            lo, hi = clopper_pearson(x, runs)
            xr = sum(r[f"reused_{e}"] for r in res)
            rlo, rhi = clopper_pearson(xr, runs)
            print(f"  min_effect={e:.2f}: false confirmation on fresh launches {x}/{runs} = {x / runs:.4f} "
                  f"[{lo:.4f}, {hi:.4f}]   (the same test on the exploration launches: {xr / runs:.4f} "
                  f"[{rlo:.4f}, {rhi:.4f}])")
            checks.append((f"{noise}, min_effect={e:.2f}: false confirmation at most alpha", lo <= ALPHA,
                           f"{x / runs:.4f}, 95% CI [{lo:.4f}, {hi:.4f}], alpha {ALPHA}"))
        for name in ("naive", *CORRECTIONS):
            v = np.array([r[name] for r in res])
            cov = sum(r[f"{name}_covers"] for r in res)
            clo, chi = clopper_pearson(cov, runs)
            print(f"  winner's exploration estimate, {name:21s}: mean log ratio {v.mean():+.5f} "
                  f"(SE {v.std(ddof=1) / math.sqrt(runs):.5f}; bias x{math.exp(v.mean()):.4f}), median "
                  f"{np.median(v):+.5f}, P(> 1) {np.mean(v > 0):.3f}; 90% interval covers 1: {cov / runs:.3f} "
                  f"[{clo:.3f}, {chi:.3f}]")
        print()
    cal.print_checks(checks, t0)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
