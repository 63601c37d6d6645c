"""Calibration of the anytime-valid analysis, extensions and the hypothesis-level refutation rule.

Same simulated experiments as `benchmarks/calibration.py` (its noise model, slow launches included,
and its scenarios), fed to `framework.analysis.verdicts.analyze` exactly as a run would:

1. Anytime-valid error rates under continuous monitoring with extension: every null scenario (A/A
   and effects exactly at the margin or threshold) is run to 20 launches per condition and analysed
   with `design.analysis: anytime`. Its confidence sequences and e-values are running intersections
   and suprema over every block count, so the verdict at 20 is "decided at some look after any
   block from 2 to 20": the error of a user who looks after every launch, stops whenever they like,
   or extends a finished run, up to 20 launches. Each wrong verdict must stay <= alpha + 2 MC-SE.
2. Expected launches on the seed's effects (`eagle3_allreduce`): anytime with a look after every
   launch per condition (and after every block of 2, as the run's default block), capped at 20,
   against the group-sequential and fixed designs of `benchmarks/calibration.py`.
3. "Run 5, extend to 10 if undecided" under the fixed-sample rule (A/A), against the inflation
   `framework.stats.extension.inflated_alpha` states, and the same habit under the anytime rule.
4. Hypothesis-level refutation with two true predictions at their thresholds: P(hypothesis refuted)
   must stay <= alpha + 2 MC-SE (the rule before was 0.086 at alpha 0.05).
5. Launch-outcome predictions under anytime (`kind: launches`, a claimed `rate`): launches of one
   condition, each with the expected outcome with probability q, i.i.d.; a look after every launch
   (one launch per block) up to 40, through `analyze`. At q = rate (the boundary of both nulls) each
   wrong verdict must stay <= alpha + 2 MC-SE; then the launches needed to decide at other q.

    python benchmarks/calibration_anytime.py           # 800 simulations per null scenario
    python benchmarks/calibration_anytime.py --quick   # 100

Nothing is tuned to the outcome: the seed, the counts, the cap of 20 and the e-process's prior scale
were fixed before the first run; figures are printed with their Monte Carlo standard errors.
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
from framework.analysis.verdicts import analyze  # noqa: E402
from framework.analysis.planning import plan_anytime  # noqa: E402
from framework.core.spec import Hypothesis  # noqa: E402
from framework.stats.anytime import log_e_rate  # noqa: E402
from framework.stats.extension import inflated_alpha  # noqa: E402

SEED = 20261130
ALPHA = cal.ALPHA
CAP = 20


def _anytime(h: Hypothesis) -> Hypothesis:
    data = h.model_dump()
    data["design"]["analysis"] = "anytime"
    return Hypothesis.model_validate(data)


def null_one(args: tuple) -> str:
    sc, i, seed = args
    rng = np.random.default_rng([seed, i])
    rows = cal.simulate_rows(sc.h, sc.ratios, sc.eagle, CAP, rng)
    return analyze(_anytime(sc.h), rows).predictions[0].verdict


def seed_one(args: tuple) -> tuple[int | None, str]:
    """The first launch count per condition at which every prediction is decided (None: not by the cap)."""
    sc, i, seed = args
    rng = np.random.default_rng([seed, i])
    rows = cal.simulate_rows(sc.h, sc.ratios, sc.eagle, CAP, rng)
    h = _anytime(sc.h)
    for n in range(2, CAP + 1):
        a = analyze(h, cal._subset(rows, n))
        if all(p.verdict != "inconclusive" for p in a.predictions):
            return n, a.verdict
    return None, a.verdict


def extend_one(args: tuple) -> tuple[bool, bool]:
    """A/A, 'run 5, extend to 10 if undecided': (wrong 'supported' under the fixed rule, under anytime)."""
    sc, i, seed = args
    rng = np.random.default_rng([seed, i])
    rows = cal.simulate_rows(sc.h, sc.ratios, sc.eagle, 10, rng)
    out = []
    for h in (sc.h, _anytime(sc.h)):
        first = analyze(h, cal._subset(rows, 5)).predictions[0].verdict
        final = first if first != "inconclusive" else analyze(h, rows).predictions[0].verdict
        out.append(final == "supported")
    return out[0], out[1]


def refute_one(args: tuple) -> tuple[bool, bool]:
    """Two true predictions at their thresholds: (hypothesis refuted, any prediction refuted at alpha)."""
    h, ratios, eagle, i, seed = args
    rng = np.random.default_rng([seed, i])
    a = analyze(h, cal.simulate_rows(h, ratios, eagle, cal.FIXED_LAUNCHES, rng))
    return a.verdict == "refuted", any(p.verdict == "refuted" for p in a.predictions)


LAUNCH_CAP = 40  # looks (launches) of section 5
LAUNCH_RATES = (0.2, 0.5, 0.8)  # claimed rates at whose boundary the error is measured
LAUNCH_TRUE_Q = (0.0, 0.2, 0.35, 0.65, 0.8, 1.0)  # true rates for the launches needed, at the claimed 0.5


def _launch_hypothesis(rate: float) -> Hypothesis:
    return Hypothesis.model_validate({
        "name": "calib_launches", "statement": "calibration", "experiment": "none",
        "factors": {"cfg": {"reference": "x", "levels": {"x": {}}}},
        "predictions": [{"id": "starts", "kind": "launches", "where": {"cfg": "x"}, "expect": "starts",
                         "rate": rate}],
        "design": {"launches": LAUNCH_CAP, "requests": 1, "warmup": 0, "alpha": ALPHA, "seed": 1,
                   "analysis": "anytime"}})


def _launch_rows(q: float, rng: np.random.Generator) -> list[dict[str, Any]]:
    """LAUNCH_CAP launches of the one condition, one per block; a started launch serves one request."""
    rows: list[dict[str, Any]] = []
    for r, ok in enumerate(rng.random(LAUNCH_CAP) < q):
        lid = f"c0-r{r}-a1"
        rows.append({"kind": "launch", "launch_id": lid, "condition": 0, "replicate": r, "attempt": 1,
                     "ok": bool(ok), "error": None if ok else "RuntimeError: boom"})
        if ok:
            rows.append({"kind": "request", "trial_id": f"{lid}-q0", "launch_id": lid, "condition": 0,
                         "warmup": False, "ok": True, "decode_tok_s": 100.0})
    return rows


def launch_one(args: tuple) -> tuple[str, int | None]:
    """The verdict after LAUNCH_CAP launches (decided at some look, by the running supremum) and the first
    launch count at which an e-process of that verdict reached 1/alpha (None: undecided)."""
    rate, q, i, seed = args
    p = analyze(_launch_hypothesis(rate), _launch_rows(q, np.random.default_rng([seed, i]))).predictions[0]
    side = {"supported": "above", "refuted": "below"}.get(p.verdict)
    if side is None:
        return p.verdict, None
    first = next(n for k, n in p.details["looks"] if log_e_rate(k, n, rate, side) >= math.log(1 / ALPHA))
    return p.verdict, first


def _rate(xs: list[bool]) -> tuple[float, float]:
    return cal._rate(list(xs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sims", type=int, default=None, help="simulations per null scenario (default 800, quick 100)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    n_sims = args.sims or (100 if args.quick else 800)
    t0 = time.time()
    checks: list[tuple[str, bool, str]] = []
    se_nominal = math.sqrt(ALPHA * (1 - ALPHA) / n_sims)
    all_sc = cal.scenarios()
    nulls = [sc for sc in all_sc if sc.truth in ("A/A", "at margin")]
    print(f"anytime calibration: alpha={ALPHA}, noise model of benchmarks/calibration.py (slow launches included); "
          f"seed {SEED}; {n_sims} simulations per scenario; {args.workers} worker(s)\n")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        chunk = max(1, n_sims // (8 * args.workers))
        print(f"1. anytime-valid, continuous monitoring with extension (a look after every launch, 2..{CAP}):")
        for si, sc in enumerate(nulls):
            res = list(pool.map(null_one, [(sc, i, SEED + si) for i in range(n_sims)], chunksize=chunk))
            sup, ref = _rate([v == "supported" for v in res]), _rate([v == "refuted" for v in res])
            print(f"  {sc.name:58s} supported {cal._fmt(*sup)}  refuted {cal._fmt(*ref)}", flush=True)
            for err in sc.errors:
                rate = sup if err == "supported" else ref
                checks.append((f"anytime, monitored to {CAP}: {sc.name}: P({err})", rate[0] <= ALPHA + 2 * se_nominal,
                               f"{rate[0]:.4f} <= {ALPHA} + 2*{se_nominal:.4f}"))

        seed_sc = all_sc[-1]
        res = list(pool.map(seed_one, [(seed_sc, i, SEED + 100) for i in range(n_sims)], chunksize=chunk))
        stops = [n if n is not None else CAP for n, _ in res]
        power = _rate([v == "supported" for _, v in res])
        undecided = sum(n is None for n, _ in res)
        even = [2 * math.ceil(n / 2) for n in stops]
        sd1, sd2 = np.std(stops, ddof=1) / math.sqrt(n_sims), np.std(even, ddof=1) / math.sqrt(n_sims)
        print(f"\n2. eagle3_allreduce on the seed's effects, anytime, cap {CAP}: P(all three supported) = "
              f"{cal._fmt(*power)}; undecided at the cap {undecided}/{n_sims}")
        print(f"  mean launches/condition: a look after every launch {np.mean(stops):.2f}±{sd1:.2f}; "
              f"after every block of 2 {np.mean(even):.2f}±{sd2:.2f}")
        print("  (benchmarks/calibration.py, same noise model: group-sequential 5.84±0.08 launches at power 0.953; "
              "fixed design 10 launches for power 0.944)")
        every, pairs = (plan_anytime(seed_sc.h, **cal.seed_assumptions(), alpha=ALPHA, block=b, at_least=CAP).curve
                        for b in (1, 2))
        k1, k2 = every.at(CAP), pairs.at(CAP)
        p1 = every.hypothesis[k1]
        print(f"  plan's model (framework.analysis.planning.simulate_anytime, same noise model, {every.sims} runs): "
              f"P(all three supported) = {cal._fmt(p1, math.sqrt(p1 * (1 - p1) / every.sims))}; mean launches "
              f"{every.launches[k1]:.2f}±{every.launches_se[k1]:.2f} (every launch), "
              f"{pairs.launches[k2]:.2f}±{pairs.launches_se[k2]:.2f} (blocks of 2)")

        aa = next(sc for sc in all_sc if sc.name == "increase e=0, A/A, EAGLE noise")
        res = list(pool.map(extend_one, [(aa, i, SEED + 200) for i in range(n_sims)], chunksize=chunk))
        fixed, anyt = _rate([r[0] for r in res]), _rate([r[1] for r in res])
        bound = inflated_alpha(ALPHA, 5, 10)
        print(f"\n3. A/A ({aa.name}), 'run 5, extend to 10 if undecided': wrong 'supported' under the fixed rule "
              f"{cal._fmt(*fixed)} (stated bound {bound:.3f}); under the anytime rule {cal._fmt(*anyt)}")
        checks.append(("extension under the fixed rule stays within the stated inflation",
                       fixed[0] <= bound + 2 * math.sqrt(bound * (1 - bound) / n_sims),
                       f"{fixed[0]:.4f} <= {bound:.4f} + 2 SE"))
        checks.append(("extension under the anytime rule: P(supported) <= alpha + 2 SE",
                       anyt[0] <= ALPHA + 2 * se_nominal, f"{anyt[0]:.4f} <= {ALPHA} + 2*{se_nominal:.4f}"))

        inc = {"kind": "increase", "factor": "fusion", "level": "on", "min_effect": 0.10}
        h = cal._four_cell([{"id": "a", **inc, "where": {"decoding": "baseline"}},
                            {"id": "b", **inc, "where": {"decoding": "eagle3"}}])
        ratios = {0: 1.0, 1: 1.0, 2: 1.10, 3: 1.10}
        n_ref = 2 * n_sims
        res = list(pool.map(refute_one, [(h, ratios, (1, 3), i, SEED + 300) for i in range(n_ref)], chunksize=chunk))
        hyp, anyp = _rate([r[0] for r in res]), _rate([r[1] for r in res])
        se_ref = math.sqrt(ALPHA * (1 - ALPHA) / n_ref)
        print(f"\n4. two true increase predictions exactly at their thresholds (fixed, {cal.FIXED_LAUNCHES} launches), "
              f"{n_ref} simulations: P(hypothesis refuted) = {cal._fmt(*hyp)} (Bonferroni alpha/2 per refutation); "
              f"P(any prediction refuted at alpha) = {cal._fmt(*anyp)} (the former hypothesis rule)")
        checks.append(("hypothesis-level refutation, two true predictions at threshold: P(refuted)",
                       hyp[0] <= ALPHA + 2 * se_ref, f"{hyp[0]:.4f} <= {ALPHA} + 2*{se_ref:.4f}"))

        n_launch = 4 * n_sims  # cheap: launch rows only
        se_launch = math.sqrt(ALPHA * (1 - ALPHA) / n_launch)
        print(f"\n5. launch outcomes under anytime (claimed rate, Beta(1,1) e-processes), a look after every launch "
              f"1..{LAUNCH_CAP}, {n_launch} simulations each:")
        for j, rate in enumerate(LAUNCH_RATES):
            res = list(pool.map(launch_one, [(rate, rate, i, SEED + 400 + j) for i in range(n_launch)],
                                chunksize=max(1, n_launch // (8 * args.workers))))
            sup, ref = _rate([v == "supported" for v, _ in res]), _rate([v == "refuted" for v, _ in res])
            print(f"  true q = claimed rate {rate}: supported {cal._fmt(*sup)}  refuted {cal._fmt(*ref)}", flush=True)
            for err, r in (("supported", sup), ("refuted", ref)):
                checks.append((f"launches, anytime, monitored to {LAUNCH_CAP}, q = rate {rate}: P({err})",
                               r[0] <= ALPHA + 2 * se_launch, f"{r[0]:.4f} <= {ALPHA} + 2*{se_launch:.4f}"))
        print(f"  claimed rate 0.5, launches to a verdict (undecided counted as {LAUNCH_CAP}):")
        for j, q in enumerate(LAUNCH_TRUE_Q):
            res = list(pool.map(launch_one, [(0.5, q, i, SEED + 500 + j) for i in range(n_sims)], chunksize=chunk))
            stops = [n if n is not None else LAUNCH_CAP for _, n in res]
            sup, ref = _rate([v == "supported" for v, _ in res]), _rate([v == "refuted" for v, _ in res])
            sd = np.std(stops, ddof=1) / math.sqrt(n_sims)
            print(f"    true q {q:4.2f}: supported {cal._fmt(*sup)}  refuted {cal._fmt(*ref)}  "
                  f"mean launches {np.mean(stops):5.2f}±{sd:.2f}  undecided by {LAUNCH_CAP}: "
                  f"{sum(n is None for _, n in res)}/{n_sims}", flush=True)
    cal.print_checks(checks, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
