"""Calibration of the bisection over versions (`python -m framework bisect`): how often it names the right
version, how often it names one when nothing regressed, and what it spends.

64 versions; with a regression, decode throughput is 3% lower (x 1/1.03, the sim's `--sim-decode-slowdown 1.03`)
from version k on, k drawn uniformly from 1..63 per run; without one, every version has the same truth. Launch
values are drawn in-process from the sim's noise model as `benchmarks/calibration.py` states it (launch offset
N(0, 0.006^2), a slow launch with probability 0.03 at x 1/1.08, the mean of 3 measured requests with
N(0, 0.004^2) jitter), and the bisection is decided by the framework's own replay
(`framework.analysis.bisect.replay`), called after every batch of launches exactly as the run's policy calls it,
with the block's defaults (threshold 0.03, margin 0.015, 3 first launches, blocks of 2, max_launches 60) and
alpha 0.05 (ends 0.025, each of at most 6 probes 0.05/12).

Printed: the hit rate (the right version named) and the false-naming rate (a version named with no
regression), each with its Clopper-Pearson 95% interval; the outcomes; the mean number of versions probed (the
ends included) and of launches; beside them a fixed-n bisection, every compared version at one n planned in
advance for power 0.9 per comparison from the noise model's launch sd (a normal approximation at the same alpha
split, decided by the sign of the mean contrast: it never stops undecided), and a linear scan at that n.

    python benchmarks/calibration_bisect.py            # 400 bisections per scenario (a few minutes, 1 core)
    python benchmarks/calibration_bisect.py --quick    # 60 per scenario

Seeded: run r of scenario s draws from numpy's default_rng([seed, s, r]). Nothing here is tuned to the outcome:
the seed, the counts, the block's defaults and the noise model were fixed before the first full run.
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
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import calibration as cal  # noqa: E402

from framework.analysis.bisect import Settings, replay  # noqa: E402
from framework.analysis.ruleset import LATEST, RULESETS  # noqa: E402

SEED = 20261202
VERSIONS = 64
SLOWDOWN = 1.03
ALPHA = 0.05
SETTINGS = Settings(versions=VERSIONS, alpha=ALPHA, threshold=0.03, margin=0.015, launches=3, block=2,
                    max_launches=60, max_failures=3, gap=RULESETS[LATEST].bisect_gap)  # the rules a run uses now


def launch_values(rng: np.random.Generator, ratio: float, n: int) -> list[float]:
    """n launch values (launch mean of decode tok/s) of a version whose truth is `ratio` x 100."""
    offsets = rng.normal(0.0, cal.SD_LAUNCH, n) - math.log(cal.SLOW_FACTOR) * (rng.random(n) < cal.SLOW_PROB)
    jitter = rng.normal(0.0, cal.SD_REQUEST, (n, cal.REQUESTS))
    return [float(v) for v in (100.0 * ratio * np.exp(offsets[:, None] + jitter)).mean(axis=1)]


def truth(k: int | None, v: int) -> float:
    return 1.0 / SLOWDOWN if k is not None and v >= k else 1.0


def one_bisection(args: tuple) -> dict[str, Any]:
    seed, scenario, run, regressed = args
    rng = np.random.default_rng([seed, scenario, run])
    k = int(rng.integers(1, VERSIONS)) if regressed else None
    values: list[list[float]] = [[] for _ in range(VERSIONS)]
    fails = [0] * VERSIONS
    while True:
        st = replay(SETTINGS, values, fails)
        if st.done:
            break
        for v, target in sorted(st.need.items()):
            values[v] += launch_values(rng, truth(k, v), target - len(values[v]))
    return {"k": k, "outcome": st.outcome, "named": st.first_bad if st.outcome == "named" else None,
            "probed": sum(1 for v in values if v), "launches": sum(len(v) for v in values),
            "fixed": fixed_bisection(rng, k)}


def launch_log_sd(draws: int = 200_000) -> float:
    """The noise model's sd of a launch's log value (slow launches included), by Monte Carlo, seeded."""
    return float(np.std(np.log(launch_values(np.random.default_rng(1), 1.0, draws)), ddof=1))


SD = launch_log_sd()


def fixed_n() -> int:
    """One n for every comparison, planned for power 0.9 at the same alpha split (normal approximation)."""
    delta = math.log(SLOWDOWN)
    a_ends, a_probe = SETTINGS.alphas
    z = sps.norm.ppf
    ends = ((z(1 - a_ends / 2) + z(0.9)) * SD * math.sqrt(2) / (delta - math.log1p(SETTINGS.margin))) ** 2
    probe = ((z(1 - a_probe / 2) + z(0.9)) * SD * math.sqrt(1.5) / (delta / 2)) ** 2
    return math.ceil(max(ends, probe))


N_FIXED = fixed_n()


def fixed_bisection(rng: np.random.Generator, k: int | None) -> dict[str, Any]:
    """The fixed-n bisection: ends and probes at N_FIXED launches each, a t interval at the split alpha for the
    ends (a change beyond the margin, else nothing named), the sign of the mean contrast for each probe."""
    n, good, bad = N_FIXED, 0, VERSIONS - 1
    x = {v: np.log(launch_values(rng, truth(k, v), n)) for v in (good, bad)}
    c = x[bad] - x[good]
    half = sps.t.ppf(1 - SETTINGS.alphas[0] / 2, n - 1) * c.std(ddof=1) / math.sqrt(n)
    m = math.log1p(SETTINGS.margin)
    if not (c.mean() - half > m or c.mean() + half < -m):
        return {"named": None, "launches": 2 * n}
    sign = 1.0 if c.mean() > 0 else -1.0
    lo, hi, probes = good, bad, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        xm = np.log(launch_values(rng, truth(k, mid), n))
        probes += 1
        lo, hi = (lo, mid) if np.mean(xm - (x[good] + x[bad]) / 2) * sign > 0 else (mid, hi)
    return {"named": hi, "launches": (2 + probes) * n}


def clopper_pearson(x: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(x, n, alpha=1 - level, method="beta")
    return float(lo), float(hi)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 bisections per scenario: a smoke run")
    ap.add_argument("--runs", type=int, default=None, help="bisections per scenario (default 400, quick 60)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--workers", type=int, default=1 if (os.cpu_count() or 1) <= 2 else 2)
    args = ap.parse_args(argv)
    runs = args.runs or (60 if args.quick else 400)
    t0 = time.time()
    s = SETTINGS
    print(f"bisection calibration: {VERSIONS} versions, decode x1/{SLOWDOWN} from version k (uniform on 1..63) or "
          f"no regression; noise of benchmarks/calibration.py (launch log-sd {SD:.4f} with slow launches); "
          f"threshold {s.threshold}, margin {s.margin}, launches {s.launches}, block {s.block}, max_launches "
          f"{s.max_launches}; alpha {s.alpha} (ends {s.alphas[0]:.4g}, {s.probes} probes at {s.alphas[1]:.4g}); "
          f"fixed-n bisection at n = {N_FIXED} per compared version; seed {args.seed}; {runs} runs per scenario\n")
    checks: list[tuple[str, bool, str]] = []
    for index, (name, regressed) in enumerate((("planted 3% regression", True), ("no regression", False))):
        jobs = [(args.seed, index, r, regressed) for r in range(runs)]
        if args.workers > 1:
            with ProcessPoolExecutor(max_workers=args.workers) as pool:
                res = list(pool.map(one_bisection, jobs, chunksize=max(1, runs // (8 * args.workers))))
        else:
            res = [one_bisection(j) for j in jobs]
        outcomes: dict[str, int] = {}
        for r in res:
            key = r["outcome"] if r["outcome"] != "named" else ("named right" if r["named"] == r["k"] else
                                                                 "named wrong")
            outcomes[key] = outcomes.get(key, 0) + 1
        probed = np.mean([r["probed"] for r in res])
        launches = np.mean([r["launches"] for r in res])
        fixed_launches = np.mean([r["fixed"]["launches"] for r in res])
        print(f"{name}: outcomes {dict(sorted(outcomes.items()))}")
        print(f"  probed versions (ends included): mean {probed:.2f}, max {max(r['probed'] for r in res)}; "
              f"launches: mean {launches:.1f} (sd {np.std([r['launches'] for r in res]):.1f})")
        print(f"  fixed-n bisection (n = {N_FIXED}): launches mean {fixed_launches:.1f}; a linear scan at that n: "
              f"{VERSIONS * N_FIXED}")
        if regressed:
            hit = sum(r["named"] == r["k"] for r in res)
            wrong = sum(r["named"] is not None and r["named"] != r["k"] for r in res)
            lo, hi = clopper_pearson(hit, runs)
            wlo, whi = clopper_pearson(wrong, runs)
            fhit = sum(r["fixed"]["named"] == r["k"] for r in res)
            flo, fhi = clopper_pearson(fhit, runs)
            print(f"  hit rate {hit}/{runs} = {hit / runs:.3f} [{lo:.3f}, {hi:.3f}]; wrong version named "
                  f"{wrong}/{runs} = {wrong / runs:.3f} [{wlo:.3f}, {whi:.3f}]; fixed-n hit rate "
                  f"{fhit / runs:.3f} [{flo:.3f}, {fhi:.3f}]")
            checks.append(("right version found in at least 1 - alpha of runs", hi >= 1 - ALPHA,
                           f"{hit / runs:.3f}, 95% CI [{lo:.3f}, {hi:.3f}], 1 - alpha {1 - ALPHA}"))
            checks.append(("wrong version named in at most alpha of runs", wlo <= ALPHA,
                           f"{wrong / runs:.3f}, 95% CI [{wlo:.3f}, {whi:.3f}], alpha {ALPHA}"))
            checks.append(("mean probed versions at most 8", probed <= 8, f"{probed:.2f}"))
        else:
            named = sum(r["named"] is not None for r in res)
            lo, hi = clopper_pearson(named, runs)
            fnamed = sum(r["fixed"]["named"] is not None for r in res)
            print(f"  a version named {named}/{runs} = {named / runs:.3f} [{lo:.3f}, {hi:.3f}]; fixed-n: "
                  f"{fnamed / runs:.3f}")
            checks.append(("a version named without a regression in at most alpha of runs", lo <= ALPHA,
                           f"{named / runs:.3f}, 95% CI [{lo:.3f}, {hi:.3f}], alpha {ALPHA}"))
        print()
    cal.print_checks(checks, t0)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
