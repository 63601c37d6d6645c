"""Calibration of the anytime analysis over machines (rules version 4, `anytime_machines`).

A/A (true fleet ratio exactly 1, "increase e=0": "supported" is a false increase, "refuted" a false
decrease) with the noise model of `benchmarks/calibration.py` (launch offsets, slow launches, request
jitter), 20 launches per condition, block b on machine b mod M as `design.machines: M` runs it, and a
machine x configuration effect: every (machine, condition) gets its own log offset N(0, 0.1^2), drawn
afresh in each simulation (the machines are a sample of a fleet whose mean effect is 0). Each simulated
run is analysed through `framework.analysis.verdicts.analyze` with `design.analysis: anytime` under rules
version 3 (the block contrasts pooled over machines) and version 4 (the machine as the unit), and with
the fixed-sample machine-means rule (Welch method under version 3/4) for reference. The anytime verdict
at 20 launches is "decided at some look" (running intersections), so it is the error of a user who looks
after every block. Each wrong verdict of version 4 must stay <= alpha + 2 MC-SE. Power lines (true
fleet ratios 1.1 and 1.3, 8 machines) shows that the rule can decide.

    python benchmarks/calibration_anytime_machines.py           # 400 simulations per cell
    python benchmarks/calibration_anytime_machines.py --quick   # 100

Nothing is tuned to the outcome: the seed, the counts, the machine sd and the round weights
6 / (pi^2 k^2) were fixed before the first run; figures are printed with their Monte Carlo standard errors.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import calibration as cal  # noqa: E402

from framework.analysis.ruleset import RULESETS  # noqa: E402
from framework.analysis.verdicts import analyze  # noqa: E402
from framework.core.spec import Hypothesis  # noqa: E402

SEED = 20261202
ALPHA = cal.ALPHA
LAUNCHES = 20
SD_MACHINE_EFFECT = 0.1


def _hyp() -> Hypothesis:
    return cal._two_cell({"kind": "increase", "min_effect": 0.0})


def on_machines(rows: list[dict[str, Any]], m: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Block b on machine b mod m; each (machine, condition) moved by its own factor exp(N(0, 0.1^2))."""
    g = rng.normal(0.0, SD_MACHINE_EFFECT, (m, 2))
    out, where = [], {}
    for r in rows:
        if r["kind"] == "launch":
            j = r["block"] % m
            where[r["launch_id"]] = j
            out.append({**r, "machine": {"id": f"machine-{j}"}})
        else:
            j = where[r["launch_id"]]
            out.append({**r, "decode_tok_s": r["decode_tok_s"] * math.exp(g[j, r["condition"]])})
    return out


def one(args: tuple) -> dict[str, str]:
    m, ratio, i = args
    rng = np.random.default_rng([SEED, m, int(ratio * 1000), i])
    h = _hyp()
    rows = on_machines(cal.simulate_rows(h, {0: 1.0, 1: ratio}, (), LAUNCHES, rng), m, rng)
    return {"anytime v3": analyze(h, rows, method="anytime", ruleset=RULESETS[3]).predictions[0].verdict,
            "anytime v4": analyze(h, rows, method="anytime", ruleset=RULESETS[4]).predictions[0].verdict,
            "machine means (welch) v4": analyze(h, rows, method="welch", ruleset=RULESETS[4]).predictions[0].verdict}


def _rate(xs: list[bool]) -> tuple[float, float]:
    p = sum(xs) / len(xs)
    return p, math.sqrt(max(p * (1 - p), 1e-12) / len(xs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    n = 100 if args.quick else 400
    t0 = time.time()
    ok = True
    print(f"A/A, {LAUNCHES} launches per condition, machine x configuration sd {SD_MACHINE_EFFECT}, alpha {ALPHA}, "
          f"{n} simulations per cell (seed {SEED})")
    print(f"{'machines':>8}  {'rule':<26} {'false increase':>16} {'false decrease':>16}")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for m in (2, 4):
            res = list(pool.map(one, [(m, 1.0, i) for i in range(n)], chunksize=8))
            for rule in res[0]:
                up, se_up = _rate([r[rule] == "supported" for r in res])
                down, se_down = _rate([r[rule] == "refuted" for r in res])
                print(f"{m:>8}  {rule:<26} {up:>9.3f} +- {se_up:.3f} {down:>9.3f} +- {se_down:.3f}")
                if rule == "anytime v4":
                    for name, p, se in (("increase", up, se_up), ("decrease", down, se_down)):
                        good = p <= ALPHA + 2 * se
                        ok &= good
                        print(f"          {'PASS' if good else 'FAIL'}: false {name} {p:.3f} <= alpha + 2 MC-SE "
                              f"{ALPHA + 2 * se:.3f}")
        for ratio in (1.1, 1.3):
            res = list(pool.map(one, [(8, ratio, i) for i in range(n)], chunksize=8))
            print(f"power: true fleet ratio {ratio}, 8 machines, same noise")
            for rule in res[0]:
                p, se = _rate([r[rule] == "supported" for r in res])
                print(f"{8:>8}  {rule:<26} supported {p:.3f} +- {se:.3f}")
    print(f"{time.time() - t0:.0f} s; {'all PASS' if ok else 'some FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
