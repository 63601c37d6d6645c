"""Calibration of the decision rules: error rates and power on simulated experiments with known truth.

Pure statistics, no HTTP: trial rows are drawn from the simulator's noise model (the profile's
`noise` block, docs/model.md) and fed to `framework.analysis.verdicts.analyze` (fixed design) and
`framework.analysis.verdicts.sequential_look` (group-sequential design), exactly as a run would.

Noise model per condition (log scale): each launch gets an offset N(0, 0.006^2), and with
probability 0.03 it is a slow launch (every request 8% slower: throughput / 1.08); each of the
3 measured requests (after 1 warm-up) adds N(0, 0.004^2) jitter, and EAGLE-like conditions add the
accept-length variability N(0, 0.04^2) per request. A launch's mean is the mean of its 3 requests.

Scenarios: A/A nulls, effects exactly at the margin or threshold (the worst case for each error),
true equivalence, effects of 5, 10 and 20%, and the seed's effects for `eagle3_allreduce`
(baseline fusion ratio 1.001, EAGLE-3 fusion ratio 96.1/54.1 = 1.776). Fixed design: the
hypothesis default of 5 launches per condition; sequential design: the DSL's defaults, blocks of 2
with O'Brien-Fleming-type spending, capped as a run caps it when `design.max_launches` is left out:
the fixed n times the group-sequential inflation factor, in whole blocks (6 launches, 3 looks, for
the fixed 5). The error rates are checked a second time under a long sequential design (an explicit
cap of 20: 10 looks), where repeated looks would show first. For the seed's effects the fixed n is
the one `planning.plan` gives for power 0.9 (a user's `plan` -> `design.launches` workflow), and the
sequential cap follows from it by the same rule.

    python benchmarks/calibration.py            # the full run (a few minutes on 2 cores)
    python benchmarks/calibration.py --quick    # a smoke run with few simulations

Every figure is printed with its Monte Carlo standard error; the acceptance checks at the end say
PASS or FAIL as they come out. Nothing here is tuned to the outcome: the seed, the counts and the
noise model were fixed before the first run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.analysis.verdicts import analyze, sequential_look  # noqa: E402
from framework.core.design import conditions  # noqa: E402
from framework.core.spec import Hypothesis  # noqa: E402
from framework.stats.sequential import inflation_factor, sequential_cap  # noqa: E402

SEED = 20261129
ALPHA = 0.05
FIXED_LAUNCHES = 5
BLOCK = 2
LONG_CAP = 20  # the long sequential design of the second error-rate check (10 looks)
REQUESTS, WARMUP = 3, 1
SD_LAUNCH, SD_REQUEST, SD_ACCEPT = 0.006, 0.004, 0.04
SLOW_PROB, SLOW_FACTOR = 0.03, 1.08
SEED_BASELINE_RATIO, SEED_EAGLE_RATIO = 92.7 / 92.6, 96.1 / 54.1
SEED_FIXED_NS = (2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20)  # fixed designs tried for the seed's effects


# --------------------------------------------------------------------------- hypotheses


def _two_cell(prediction: dict[str, Any]) -> Hypothesis:
    return Hypothesis.model_validate({
        "name": "calib", "statement": "calibration", "experiment": "none",
        "factors": {"x": {"reference": "a", "levels": {"a": {}, "b": {}}}},
        "predictions": [{"id": "p", "factor": "x", "level": "b", **prediction}],
        "design": {"launches": FIXED_LAUNCHES, "requests": REQUESTS, "warmup": WARMUP, "alpha": ALPHA, "seed": 1},
    })


def _four_cell(predictions: list[dict[str, Any]]) -> Hypothesis:
    return Hypothesis.model_validate({
        "name": "calib", "statement": "calibration", "experiment": "none",
        "factors": {"fusion": {"reference": "off", "levels": {"off": {}, "on": {}}},
                    "decoding": {"reference": "baseline", "levels": {"baseline": {}, "eagle3": {}}}},
        "predictions": predictions,
        "design": {"launches": FIXED_LAUNCHES, "requests": REQUESTS, "warmup": WARMUP, "alpha": ALPHA, "seed": 1},
    })


def _interaction(min_effect: float) -> dict[str, Any]:
    return {"id": "p", "kind": "interaction", "factor": "fusion", "level": "on", "by": "decoding",
            "by_level": "eagle3", "direction": "larger", "min_effect": min_effect}


SEED_PREDICTIONS = [
    {"id": "neutral_for_baseline", "kind": "equivalent", "factor": "fusion", "level": "on",
     "where": {"decoding": "baseline"}, "margin": 0.03},
    {"id": "helps_eagle3", "kind": "increase", "factor": "fusion", "level": "on",
     "where": {"decoding": "eagle3"}, "min_effect": 0.10},
    {**_interaction(0.10), "id": "helps_eagle3_more_than_baseline"},
]


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str
    truth: str
    h: Hypothesis
    ratios: dict[int, float]  # true median metric per condition (relative)
    eagle: tuple[int, ...]  # conditions with accept-length noise
    errors: tuple[str, ...]  # verdicts that are wrong under this truth (at most alpha each)
    target: str | None  # the verdict the truth implies (power), None on a threshold


def scenarios() -> list[Scenario]:
    out: list[Scenario] = []
    for noise, eagle in (("baseline noise", ()), ("EAGLE noise", (0, 1))):
        eq = {"kind": "equivalent", "margin": 0.03}
        out += [
            Scenario(f"equivalent m=3%, truth 1.03 (at margin), {noise}", "equivalent", "at margin",
                     _two_cell(eq), {0: 1.0, 1: 1.03}, eagle, ("supported", "refuted"), None),
            Scenario(f"equivalent m=3%, A/A, {noise}", "equivalent", "A/A", _two_cell(eq),
                     {0: 1.0, 1: 1.0}, eagle, ("refuted",), "supported"),
            Scenario(f"increase e=10%, truth 1.10 (at threshold), {noise}", "increase", "at margin",
                     _two_cell({"kind": "increase", "min_effect": 0.10}), {0: 1.0, 1: 1.10}, eagle,
                     ("supported", "refuted"), None),
            Scenario(f"increase e=0, A/A, {noise}", "increase", "A/A",
                     _two_cell({"kind": "increase", "min_effect": 0.0}), {0: 1.0, 1: 1.0}, eagle, ("supported",), None),
            Scenario(f"decrease e=10%, truth 0.90 (at threshold), {noise}", "decrease", "at margin",
                     _two_cell({"kind": "decrease", "min_effect": 0.10}), {0: 1.0, 1: 0.90}, eagle,
                     ("supported", "refuted"), None),
            Scenario(f"decrease e=0, A/A, {noise}", "decrease", "A/A",
                     _two_cell({"kind": "decrease", "min_effect": 0.0}), {0: 1.0, 1: 1.0}, eagle, ("supported",), None),
        ]
    # interaction: the seed's structure, EAGLE cells (decoding=eagle3: conditions 1 and 3) noisier
    four = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}
    out += [
        Scenario("interaction e=10%, truth 1.10 (at threshold)", "interaction", "at margin",
                 _four_cell([_interaction(0.10)]), {**four, 3: 1.10}, (1, 3), ("supported", "refuted"), None),
        Scenario("interaction e=0, A/A", "interaction", "A/A", _four_cell([_interaction(0.0)]), four, (1, 3),
                 ("supported",), None),
    ]
    for eff in (0.05, 0.10, 0.20):
        pct = f"{round(eff * 100)}%"
        out += [
            Scenario(f"increase e=0, truth +{pct}, EAGLE noise", "increase", f"+{pct}",
                     _two_cell({"kind": "increase", "min_effect": 0.0}), {0: 1.0, 1: 1 + eff}, (0, 1), ("refuted",),
                     "supported"),
            Scenario(f"decrease e=0, truth -{pct}, EAGLE noise", "decrease", f"-{pct}",
                     _two_cell({"kind": "decrease", "min_effect": 0.0}), {0: 1.0, 1: 1 - eff}, (0, 1), ("refuted",),
                     "supported"),
            Scenario(f"equivalent m=3%, truth +{pct}, EAGLE noise", "equivalent", f"+{pct}",
                     _two_cell({"kind": "equivalent", "margin": 0.03}), {0: 1.0, 1: 1 + eff}, (0, 1), ("supported",),
                     "refuted"),
            Scenario(f"interaction e=0, truth x{1 + eff:.2f}", "interaction", f"+{pct}",
                     _four_cell([_interaction(0.0)]), {0: 1.0, 1: 1.0, 2: 1.0, 3: 1 + eff}, (1, 3), ("refuted",),
                     "supported"),
        ]
    out.append(Scenario("eagle3_allreduce, the seed's effects", "hypothesis", "seed",
                        _four_cell(SEED_PREDICTIONS),
                        {0: 92.6, 1: 54.1, 2: 92.6 * SEED_BASELINE_RATIO, 3: 54.1 * SEED_EAGLE_RATIO},
                        (1, 3), ("refuted",), "supported"))
    return out


# --------------------------------------------------------------------------- simulation


def simulate_rows(h: Hypothesis, ratios: dict[int, float], eagle: tuple[int, ...], launches: int,
                  rng: np.random.Generator) -> list[dict[str, Any]]:
    """Trial rows (launch and request rows, as in trials.jsonl) for `launches` launches per condition."""
    rows: list[dict[str, Any]] = []
    n_req = WARMUP + REQUESTS
    for c in conditions(h):
        offsets = rng.normal(0.0, SD_LAUNCH, launches) - np.log(SLOW_FACTOR) * (rng.random(launches) < SLOW_PROB)
        sd = math.sqrt(SD_REQUEST ** 2 + (SD_ACCEPT ** 2 if c.index in eagle else 0.0))
        jitter = rng.normal(0.0, sd, (launches, n_req))
        vals = ratios[c.index] * np.exp(offsets[:, None] + jitter)
        for r in range(launches):
            lid = f"c{c.index}-r{r}-a1"
            rows.append({"kind": "launch", "launch_id": lid, "condition": c.index, "levels": c.levels,
                         "replicate": r, "block": r, "attempt": 1, "seed": r, "ok": True,
                         "startup_s": 2.0, "started": "", "finished": ""})
            for i in range(n_req):
                rows.append({"kind": "request", "trial_id": f"{lid}-{i}", "launch_id": lid, "condition": c.index,
                             "levels": c.levels, "index": i, "warmup": i < WARMUP, "ok": True,
                             "decode_tok_s": float(vals[r, i]), "e2e_s": 2.7, "replicate": r})
    return rows


def _subset(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    return [r for r in rows if r["replicate"] < n]


def run_one(args: tuple) -> dict[str, Any]:
    """One simulated experiment: fixed verdicts (for each n in fixed_ns) and the sequential path up to `cap`."""
    sc, index, seed, cap, fixed_ns, *rest = args
    method = rest[0] if rest else None
    rng = np.random.default_rng([seed, index])
    rows = simulate_rows(sc.h, sc.ratios, sc.eagle, max((cap or 0, *fixed_ns)), rng)
    out: dict[str, Any] = {"fixed": {}}
    for n in fixed_ns:
        a = analyze(sc.h, _subset(rows, n), method=method)
        out["fixed"][n] = (a.verdict, [p.verdict for p in a.predictions])
    if cap:
        max_looks = _looks(cap)
        for look in range(1, max_looks + 1):
            n = min(BLOCK * look, cap)
            a, stop, _ = sequential_look(sc.h, _subset(rows, n), look=look, max_looks=max_looks)
            if stop:
                break
        out["seq"] = (a.verdict, [p.verdict for p in a.predictions], n, look)
    return out


def pool_map(workers: int, jobs: list) -> list:
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_one, jobs, chunksize=max(1, len(jobs) // (8 * workers))))


def _looks(cap: int) -> int:
    """Looks of a sequential design capped at `cap`, counted as the runner counts them."""
    return math.ceil((cap - BLOCK) / BLOCK) + 1


def _rate(xs: list[bool]) -> tuple[float, float]:
    p = sum(xs) / len(xs)
    return p, math.sqrt(max(p * (1 - p), 1e-12) / len(xs))


def _fmt(p: float, se: float) -> str:
    return f"{p:.3f}±{se:.3f}"


def print_checks(checks: list[tuple[str, bool, str]], t0: float) -> None:
    """The closing acceptance listing every calibration benchmark prints."""
    print("\nacceptance checks:")
    for name, ok, detail in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}  {detail}")
    print(f"\n{sum(ok for _, ok, _ in checks)}/{len(checks)} checks pass; {time.time() - t0:.0f} s")


def seed_assumptions() -> dict[str, Any]:
    """This noise model and the seed's effects as the keyword arguments of `planning.plan` / `plan_anytime`."""
    sdr = {0: SD_REQUEST, 1: math.hypot(SD_REQUEST, SD_ACCEPT), 2: SD_REQUEST, 3: math.hypot(SD_REQUEST, SD_ACCEPT)}
    return {"means": scenarios()[-1].ratios, "sd_launch_log": SD_LAUNCH, "sd_request_log": sdr,
            "requests": REQUESTS, "warmup": WARMUP, "slow_launch_prob": SLOW_PROB,
            "slow_launch_factor": 1 / SLOW_FACTOR}


def _seed_plan() -> int:
    """The fixed n a user gets from `plan` for the seed's effects (power 0.9, slow launches included)."""
    from framework.analysis.planning import launches_for_hypothesis, plan

    seed = scenarios()[-1]
    rows = plan(seed.h, **seed_assumptions(), power=0.9)
    planned = launches_for_hypothesis(rows)
    print("planning.plan on the seed's effects (power 0.9, slow launches included): "
          + ", ".join(f"{r.prediction} {r.launches_per_condition}" for r in rows) + f" -> {planned} launches/condition")
    assert planned is not None
    return planned


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few simulations: a smoke run, wide MC errors")
    ap.add_argument("--sims", type=int, default=None,
                    help="simulations per null scenario (default 800, quick 100); power scenarios get a quarter")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--max-launches", type=int, default=None,
                    help="an explicit cap for the sequential designs (default: derived from the fixed n, as a run "
                         "derives it when design.max_launches is left out)")
    args = ap.parse_args(argv)
    n_sims = args.sims or (100 if args.quick else 800)
    n_power = max(50, n_sims // 4)
    n_seed = n_sims
    t0 = time.time()
    cap = args.max_launches or sequential_cap(FIXED_LAUNCHES, BLOCK, ALPHA)
    planned = _seed_plan()
    seed_cap = args.max_launches or sequential_cap(planned, BLOCK, ALPHA)
    print(f"calibration: alpha={ALPHA}, fixed design {FIXED_LAUNCHES} launches/condition, sequential blocks of "
          f"{BLOCK} up to {cap} ({_looks(cap)} looks, OBF-type spending; inflation factor "
          f"{inflation_factor(ALPHA, _looks(cap)):.3f}); {REQUESTS} requests + {WARMUP} "
          f"warm-up per launch; noise: launch sd {SD_LAUNCH}, request sd {SD_REQUEST}, accept-length sd {SD_ACCEPT} "
          f"(EAGLE cells), slow launch p={SLOW_PROB} x{1 / SLOW_FACTOR:.3f}; seed {SEED}; "
          f"{n_sims} simulations per null scenario, {n_power} per power scenario, {n_seed} for the seed's effects; "
          f"{args.workers} worker(s)")
    print("each cell: rate ± Monte Carlo SE; 'launches' = mean launches per condition at the verdict\n")
    checks: list[tuple[str, bool, str]] = []
    header = (f"{'scenario':58s} {'fixed: supported':>17s} {'refuted':>13s} | {'seq: supported':>15s} "
              f"{'refuted':>13s} {'launches':>8s}")
    print(header)
    print("-" * len(header))
    all_sc = scenarios()
    nulls = [sc for sc in all_sc if sc.truth in ("A/A", "at margin")]
    seed_result: dict[str, Any] = {}

    def error_checks(sc: Scenario, n: int, designs: list[tuple[str, tuple[float, float], tuple[float, float]]]) -> None:
        nominal_se = math.sqrt(ALPHA * (1 - ALPHA) / n)
        for err in sc.errors:
            for design, sup, ref in designs:
                rate = sup if err == "supported" else ref
                checks.append((f"{sc.name}: P({err}) {design}", rate[0] <= ALPHA + 2 * nominal_se,
                               f"{rate[0]:.4f} <= {ALPHA} + 2*{nominal_se:.4f}"))

    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for si, sc in enumerate(all_sc):
            is_seed = sc.kind == "hypothesis"
            n = n_seed if is_seed else (n_sims if sc in nulls else n_power)
            fixed_ns = SEED_FIXED_NS if is_seed else (FIXED_LAUNCHES,)
            jobs = [(sc, i, SEED + si, seed_cap if is_seed else cap, fixed_ns) for i in range(n)]
            res = list(pool.map(run_one, jobs, chunksize=max(1, n // (8 * args.workers))))
            fx = [r["fixed"][FIXED_LAUNCHES][0] for r in res]
            sq = [r["seq"][0] for r in res]
            launches = [r["seq"][2] for r in res]
            fs, fr = _rate([v == "supported" for v in fx]), _rate([v == "refuted" for v in fx])
            ss, sr = _rate([v == "supported" for v in sq]), _rate([v == "refuted" for v in sq])
            ml = float(np.mean(launches))
            ml_se = float(np.std(launches, ddof=1) / math.sqrt(len(launches)))
            print(f"{sc.name:58s} {_fmt(*fs):>17s} {_fmt(*fr):>13s} | {_fmt(*ss):>15s} {_fmt(*sr):>13s} "
                  f"{ml:5.1f}±{ml_se:.1f}", flush=True)
            if sc in nulls:  # each wrong verdict at most alpha
                error_checks(sc, n, [("fixed", fs, fr), ("sequential", ss, sr)])
            if is_seed:
                seed_result = {"res": res, "n": n, "fixed_ns": fixed_ns, "ml": ml, "ml_se": ml_se,
                               "seq_power": ss}
        if not args.max_launches:
            print(f"\nlong sequential design (design.max_launches={LONG_CAP}: {_looks(LONG_CAP)} looks), the null "
                  f"scenarios again, {n_sims} simulations each:")
            for sc in nulls:
                jobs = [(sc, i, SEED + 500 + all_sc.index(sc), LONG_CAP, ()) for i in range(n_sims)]
                res = list(pool.map(run_one, jobs, chunksize=max(1, n_sims // (8 * args.workers))))
                sq = [r["seq"][0] for r in res]
                ss, sr = _rate([v == "supported" for v in sq]), _rate([v == "refuted" for v in sq])
                ml = float(np.mean([r["seq"][2] for r in res]))
                print(f"  {sc.name:58s} supported {_fmt(*ss)}  refuted {_fmt(*sr)}  launches {ml:5.1f}", flush=True)
                error_checks(sc, n_sims, [(f"sequential, {_looks(LONG_CAP)} looks", ss, sr)])
    # the seed's effects: the fixed design's launches for the same power vs the sequential design
    print()
    res, n = seed_result["res"], seed_result["n"]
    print(f"eagle3_allreduce on the seed's effects (ratios {SEED_BASELINE_RATIO:.3f} and {SEED_EAGLE_RATIO:.3f}), "
          f"{n} simulations:")
    needed = None
    for k in seed_result["fixed_ns"]:
        p, se = _rate([r["fixed"][k][0] == "supported" for r in res])
        per = " ".join(f"{_rate([r['fixed'][k][1][j] == 'supported' for r in res])[0]:.3f}" for j in range(3))
        print(f"  fixed, {k} launches/condition: P(all three supported) = {_fmt(p, se)}  (per prediction {per})")
        if needed is None and p >= 0.9:
            needed = k
    sp = seed_result["seq_power"]
    looks = [r["seq"][3] for r in res]
    how = (f"design.max_launches={seed_cap}" if args.max_launches else
           f"the cap derived from the plan's {planned}: inflation factor {inflation_factor(ALPHA, _looks(seed_cap)):.3f}")
    print(f"  sequential, blocks of {BLOCK} up to {seed_cap} ({_looks(seed_cap)} looks; {how}): "
          f"P(all three supported) = {_fmt(*sp)}, mean launches/condition "
          f"{seed_result['ml']:.2f}±{seed_result['ml_se']:.2f}, mean looks {np.mean(looks):.2f}")
    same = next((k for k in seed_result["fixed_ns"]
                 if _rate([r["fixed"][k][0] == "supported" for r in res])[0] >= sp[0] - 2 * max(sp[1], 1 / n)), None)
    print(f"  fixed design matching the sequential design's own power ({sp[0]:.3f}, within 2 MC SE): "
          f"{same if same is not None else '> ' + str(max(seed_result['fixed_ns']))} launches/condition"
          + (f" -> sequential/fixed = {seed_result['ml'] / same:.2f}" if same else ""))
    # The criterion compares with the fixed design "for the same power" as the sequential one;
    # the reading against the fixed design sized for power 0.9 is reported beside it.
    for label, fixed_n, note in (("at the same power", same, f"power {sp[0]:.3f} both"),
                                 ("at power 0.9", needed, "fixed n for power 0.9 by simulation")):
        name = f"seed effects: sequential launches <= 60% of fixed {label}"
        if fixed_n is None:
            checks.append((name, False, f"no fixed design up to {max(seed_result['fixed_ns'])} launches does it"))
        else:
            ratio = seed_result["ml"] / fixed_n
            checks.append((name, ratio <= 0.6, f"{seed_result['ml']:.2f} / {fixed_n} = {ratio:.2f} ({note})"))
    # robust methods, fixed design, at the nulls where each error is largest
    n_robust = max(50, n_sims // 2)
    print(f"\nrobust analyses (design.analysis), fixed design of {FIXED_LAUNCHES} launches, {n_robust} simulations each:")
    robust = [sc for sc in all_sc if sc.truth == "at margin" and ("EAGLE" in sc.name or sc.kind == "interaction")]
    for method in ("rank", "bootstrap"):
        for sc in robust:
            jobs = [(sc, i, SEED + 1000 + all_sc.index(sc), False, (FIXED_LAUNCHES,), method) for i in range(n_robust)]
            res = list(pool_map(args.workers, jobs))
            fx = [r["fixed"][FIXED_LAUNCHES][0] for r in res]
            fs, fr = _rate([v == "supported" for v in fx]), _rate([v == "refuted" for v in fx])
            print(f"  {method:9s} {sc.name:58s} supported {_fmt(*fs)}  refuted {_fmt(*fr)}", flush=True)
            se = math.sqrt(ALPHA * (1 - ALPHA) / n_robust)
            for err in sc.errors:
                rate = fs if err == "supported" else fr
                checks.append((f"[{method}] {sc.name}: P({err}) fixed", rate[0] <= ALPHA + 2 * se,
                               f"{rate[0]:.4f} <= {ALPHA} + 2*{se:.4f}"))
    print_checks(checks, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
