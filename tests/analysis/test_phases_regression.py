"""A regression guard for the analysis: `analyze` and `sequential_look` on fixed trial rows, against a snapshot.

Audit recomputes stored verdicts from old ledgers and compares them within a relative 1e-9
(framework.core.tolerance), so the analysis must not move beyond that when its code is reorganised: every
verdict, reason, detail and key order exactly, every number within audit's tolerance (another CPU's BLAS
kernels, AVX-512 among them, or a newer numpy/scipy move the 15th-16th digit, never the figure).

Each case below runs the analysis on rows built from a fixed seed and compares the whole
`Analysis.model_dump()` (every number, verdict, reason and detail, and the order of the keys) to
`phases_regression.json`, written with the code as it was before the analysis was split into its phases.
The cases cover every prediction kind (increase, decrease, equivalent, interaction, launches), every method
(welch, the default, rank, bootstrap and anytime),
a launch metric, and the paths that change a verdict or its reason: losses, censored requests,
outliers, duplicates, superseded attempts, a condition that measured nothing, zero spread, the
hypothesis-level Bonferroni rule and sequential looks.

To rewrite the snapshot on purpose (a deliberate change of the analysis):
`REGRESSION_SNAPSHOT=write python -m pytest tests/analysis/test_phases_regression.py`.
"""

from __future__ import annotations

import json
import math
import os
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from stats_rows import fail_launches, simulate, with_superseded_attempt

from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze as _analyze
from framework.analysis.verdicts import sequential_look as _sequential_look
from framework.core.design import conditions
from framework.core.spec import Hypothesis, load_hypothesis
from framework.core.tolerance import first_difference

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("phases_regression.json")
SEED_MEANS = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}  # eagle3_allreduce: fusion off/on x baseline/eagle3
EAGLE_SD = {0: 0.004, 1: 0.04, 2: 0.004, 3: 0.04}
CRASH = "No supported CUDA architectures found for major versions [9, 10]"
# The snapshot is rules version 1's analysis; later versions change reasons and verdicts on purpose
# (each a RuleSet switch, tested where it is made), so the guard runs under version 1.
analyze = partial(_analyze, ruleset=RULESETS[1])
sequential_look = partial(_sequential_look, ruleset=RULESETS[1])


def _load(name: str) -> Hypothesis:
    return load_hypothesis(ROOT / "hypotheses" / f"{name}.yaml")


def _with(h: Hypothesis, *, predictions: list[dict[str, Any]] | None = None, metric: str | None = None,
          **design: Any) -> Hypothesis:
    data = h.model_dump()
    data["design"].update(design)
    if predictions is not None:
        data["predictions"] = predictions
    if metric is not None:
        data["metric"] = metric
    return Hypothesis.model_validate(data)



def _throughput_rows(h: Hypothesis, launches: int = 4, sd_launch: float = 0.03, seed: int = 0
                     ) -> list[dict[str, Any]]:
    """eagle3_under_load launches of back-to-back streamed requests: a launch metric (output_throughput)."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for c in conditions(h):
        base = {"single": 90.0, "c32": 460.0}[c.levels["load"]]
        base *= {"single": 1.45, "c32": 0.8}[c.levels["load"]] if c.levels["decoding"] == "eagle3" else 1.0
        for r in range(launches):
            lid = f"c{c.index}-r{r}-a1"
            rows.append({"kind": "launch", "launch_id": lid, "condition": c.index, "levels": c.levels, "ok": True,
                         "replicate": r, "attempt": 1, "startup_s": 1.0 + 0.1 * r})
            rate = base * math.exp(rng.normal(0, sd_launch))
            for i in range(5):
                dur = 64 / rate * math.exp(rng.normal(0, 0.01))
                rows.append({"kind": "request", "trial_id": f"{lid}-q{i}", "launch_id": lid, "condition": c.index,
                             "levels": c.levels, "index": i, "warmup": i == 0, "ok": True, "start_s": i * dur,
                             "e2e_s": dur, "time_scale": 1.0,
                             "chunk_times_s": [float(t) for t in np.linspace(dur / 64, dur, 64)],
                             "chunk_tokens": [1] * 64})
    return rows


def _rows_from_logs(h: Hypothesis, logs_by_cond: dict[int, list[float]]) -> list[dict[str, Any]]:
    rows = []
    for c, logs in logs_by_cond.items():
        for i, x in enumerate(logs):
            lid = f"c{c}-r{i}-a1"
            rows.append({"kind": "launch", "launch_id": lid, "condition": c, "replicate": i, "attempt": 1, "ok": True})
            rows.append({"kind": "request", "trial_id": f"{lid}-q0", "launch_id": lid, "condition": c, "index": 0,
                         "warmup": False, "ok": True, h.metric: float(100 * math.exp(x))})
    return rows


# --------------------------------------------------------------------------- the cases


def _eagle(method: str | None, rows_seed: int = 1, launches: int = 6, **kw: Any) -> Callable[[], Any]:
    def run() -> Any:
        h = _load("eagle3_allreduce")
        if method == "anytime":
            h = _with(h, analysis="anytime")
        rows = simulate(h, SEED_MEANS, launches=launches, sd_request=EAGLE_SD, seed=rows_seed)
        return analyze(h, rows, **({"method": method} if method and method != "anytime" else {}), **kw)
    return run


def _under_load(method: str | None) -> Callable[[], Any]:
    def run() -> Any:
        h = _load("eagle3_under_load")
        if method == "anytime":
            h = _with(h, analysis="anytime")
        rows = _throughput_rows(h, launches=7 if method == "anytime" else 4, seed=3)
        return analyze(h, rows, **({"method": method} if method and method != "anytime" else {}))
    return run


def _under_load_percentile() -> Any:
    h = _with(_load("eagle3_under_load"), metric="ttft_s.p90",
              predictions=[{"id": "ttft_down", "kind": "decrease", "factor": "decoding", "level": "eagle3",
                            "where": {"load": "single"}, "min_effect": 0.05},
                           {"id": "ttft_same_c32", "kind": "equivalent", "factor": "decoding", "level": "eagle3",
                            "where": {"load": "c32"}, "margin": 0.1}])
    rows = simulate(h, {0: 0.30, 1: 0.22, 2: 0.90, 3: 0.91}, launches=5, requests=6, metric="ttft_s",
                    sd_request=0.05, seed=4)
    return analyze(h, rows)


def _cuda13(method: str | None, launches: int, failed: dict[int, str]) -> Callable[[], Any]:
    def run() -> Any:
        h = _load("cuda13_unblocks_fusion")
        if method == "anytime":
            h = _with(h, analysis="anytime")
        rows = simulate(h, {c: 90.0 for c in range(4)}, launches=launches, failed=failed, seed=1)
        return analyze(h, rows)
    return run


def _cuda13_served_nothing() -> Any:
    """A launch that started but served no request counts against 'starts'."""
    h = _load("cuda13_unblocks_fusion")
    rows = simulate(h, {c: 90.0 for c in range(4)}, launches=3, failed={1: CRASH}, seed=2)
    rows = [dict(r, ok=False, error="HTTP 500", decode_tok_s=None)
            if r["kind"] == "request" and r["launch_id"] == "c3-r1-a1" else r for r in rows]
    return analyze(h, rows)


def _mixed_kinds(method: str | None) -> Callable[[], Any]:
    """Comparisons and a launch-outcome prediction together: both enter the hypothesis-level rule under anytime."""
    def run() -> Any:
        h = _load("eagle3_allreduce")
        preds = [p.model_dump() for p in h.predictions] + [
            {"id": "all_start", "kind": "launches", "where": {}, "expect": "starts"},
            {"id": "slower_eagle_unfused", "kind": "decrease", "factor": "decoding", "level": "eagle3",
             "where": {"fusion": "off"}, "min_effect": 0.2}]
        h = _with(h, predictions=preds, **({"analysis": "anytime"} if method == "anytime" else {}))
        rows = simulate(h, SEED_MEANS, launches=8, sd_request=EAGLE_SD, seed=21)
        return analyze(h, rows)
    return run


def _losses() -> Any:
    h = _load("eagle3_allreduce")
    rows = fail_launches(simulate(h, SEED_MEANS, launches=9, sd_request=EAGLE_SD, seed=14), {"c3-r2-a1"})
    return analyze(h, rows)


def _loss_limit() -> Any:
    h = _load("eagle3_allreduce")
    rows = fail_launches(simulate(h, SEED_MEANS, launches=9, sd_request=EAGLE_SD, seed=13),
                         {f"c0-r{i}-a1" for i in range(7)})
    return analyze(h, rows)


def _censored() -> Any:
    h = _load("eagle3_allreduce")
    out = []
    for r in simulate(h, SEED_MEANS, requests=4, sd_request=EAGLE_SD, seed=15):  # 1 in 3 (c1), 1 in 4 (c2) fail
        measured = r["kind"] == "request" and not r["warmup"]
        if measured and r["condition"] in (1, 2) and r["index"] % (2 + r["condition"]) == 0:
            r = {k: v for k, v in r.items() if k != "decode_tok_s"} | {"ok": False, "error": "timeout"}
        out.append(r)
    return analyze(h, out)


def _outlier(method: str | None) -> Callable[[], Any]:
    def run() -> Any:
        h = _load("eagle3_allreduce")
        if method == "anytime":
            h = _with(h, analysis="anytime")
        rows = simulate(h, SEED_MEANS, launches=8, sd_request=EAGLE_SD, seed=8,
                        slow={"c2-r4-a1": 1 / 1.08, "c3-r1-a1": 1.2})
        return analyze(h, rows, **({"method": method} if method and method != "anytime" else {}))
    return run


def _duplicates_and_resume() -> Any:
    h = _load("eagle3_allreduce")
    rows = simulate(h, SEED_MEANS, sd_request=EAGLE_SD, seed=12)

    again = [{**r, "reused_from": "run1"} for r in rows[:25]]  # condition 0, written twice
    return analyze(h, with_superseded_attempt(rows) + again)


def _no_data() -> Any:
    h = _load("eagle3_allreduce")
    rows = [r for r in simulate(h, SEED_MEANS, launches=4, sd_request=EAGLE_SD, seed=19)
            if not (r["kind"] == "request" and r["condition"] == 0)]
    return analyze(h, rows)


def _zero_spread() -> Any:
    h = _load("eagle3_allreduce")
    return analyze(h, simulate(h, SEED_MEANS, sd_launch=0.0, sd_request=0.0, seed=16))


def _too_few() -> Any:
    h = _load("eagle3_allreduce")
    return analyze(h, simulate(h, SEED_MEANS, launches=1, sd_request=EAGLE_SD, seed=3))


def _bonferroni(shift: float | None) -> Callable[[], Any]:
    def run() -> Any:
        from scipy import stats

        inc = {"kind": "increase", "factor": "fusion", "level": "on", "where": {"decoding": "baseline"},
               "min_effect": 0.1}
        h = _with(_load("eagle3_allreduce"),
                  predictions=[{"id": "a", **inc}, {"id": "b", **inc, "where": {"decoding": "eagle3"}}])
        noise = [0.0, 0.01, -0.01, 0.02, -0.02]
        se = (2 * sum(e * e for e in noise) / 4 / 5) ** 0.5
        theta = math.log(1.1)
        t_between = (stats.t.ppf(0.95, 8) + stats.t.ppf(0.975, 8)) / 2
        third = [theta - t_between * se + e for e in noise] if shift is None else [e + shift for e in noise]
        rows = _rows_from_logs(h, {0: noise, 1: noise, 2: third, 3: [theta + 0.5 + e for e in noise]})
        return analyze(h, rows)
    return run


def _served_nothing_counted() -> Any:
    h = _load("eagle3_allreduce")
    rows = simulate(h, SEED_MEANS, launches=4, sd_request=EAGLE_SD, seed=22)
    return analyze(h, [dict(r, ok=False, error="HTTP 500", decode_tok_s=None)
                       if r["kind"] == "request" and r["launch_id"] == "c0-r3-a1" else r for r in rows])


def _sequential(method: str | None, look: int, max_looks: int, launches: int, **kw: Any) -> Callable[[], Any]:
    def run() -> Any:
        h = _load("eagle3_allreduce")
        if method == "anytime":
            h = _with(h, analysis="anytime")
        rows = simulate(h, SEED_MEANS, launches=launches, sd_request=EAGLE_SD, seed=9)
        a, stop, reason = sequential_look(h, rows, look=look, max_looks=max_looks, **kw)
        return {"analysis": a.model_dump(), "stop": stop, "reason": reason}
    return run


def _sequential_launches() -> Any:
    h = _with(_load("cuda13_unblocks_fusion"), analysis="anytime")
    rows = simulate(h, {c: 90.0 for c in range(4)}, launches=9, failed={1: CRASH, 3: CRASH}, seed=1)
    a, stop, reason = sequential_look(h, rows, look=3, max_looks=4)
    return {"analysis": a.model_dump(), "stop": stop, "reason": reason}


CASES: dict[str, Callable[[], Any]] = {
    # equivalent, increase, interaction under every method
    "eagle_welch": _eagle(None),
    "eagle_rank": _eagle("rank"),
    "eagle_bootstrap": _eagle("bootstrap"),
    "eagle_bootstrap_seed_5": _eagle("bootstrap", rows_seed=2, seed=5),
    "eagle_anytime": _eagle("anytime", launches=9),
    "eagle_anytime_few": _eagle("anytime", launches=3),
    "eagle_alpha_0.1": _eagle(None, rows_seed=5, launches=3, alpha=0.1),
    # increase, decrease, interaction on a launch metric (output_throughput) and a percentile
    "under_load_welch": _under_load(None),
    "under_load_bootstrap": _under_load("bootstrap"),
    "under_load_anytime": _under_load("anytime"),
    "under_load_percentile": _under_load_percentile,
    # launch outcomes: counted, and tested under anytime
    "cuda13_counted": _cuda13(None, 2, {1: f"exit code 1: {CRASH}"}),
    "cuda13_counted_refuted": _cuda13(None, 3, {1: CRASH, 3: CRASH}),
    "cuda13_served_nothing": _cuda13_served_nothing,
    "cuda13_anytime_two": _cuda13("anytime", 2, {1: CRASH}),
    "cuda13_anytime_seven": _cuda13("anytime", 7, {1: CRASH}),
    "cuda13_anytime_refuted_7": _cuda13("anytime", 7, {1: CRASH, 3: CRASH}),
    "cuda13_anytime_refuted_9": _cuda13("anytime", 9, {1: CRASH, 3: CRASH}),
    "mixed_welch": _mixed_kinds(None),
    "mixed_anytime": _mixed_kinds("anytime"),
    # what changes a verdict or its reason
    "losses": _losses,
    "loss_limit": _loss_limit,
    "censored": _censored,
    "outlier_welch": _outlier(None),
    "outlier_rank": _outlier("rank"),
    "outlier_anytime": _outlier("anytime"),
    "duplicates_and_resume": _duplicates_and_resume,
    "no_data": _no_data,
    "zero_spread": _zero_spread,
    "too_few": _too_few,
    "served_nothing_counted": _served_nothing_counted,
    "bonferroni_not_at_m": _bonferroni(None),
    "bonferroni_refuted": _bonferroni(-0.2),
    # sequential looks
    "sequential_first_look": _sequential(None, 1, 10, 2),
    "sequential_stop": _sequential(None, 4, 10, 8),
    "sequential_final": _sequential(None, 3, 3, 4),
    "sequential_pocock_no_p": _sequential(None, 2, 5, 4, spending="pocock", valid_p=False),
    "sequential_anytime": _sequential("anytime", 3, 5, 6),
    "sequential_anytime_launches": _sequential_launches,
}


def _dump(result: Any) -> Any:
    """The result as it would be written: JSON, with NaN and infinities spelled out."""
    if hasattr(result, "model_dump"):
        result = result.model_dump()
    return json.loads(json.dumps(result, allow_nan=True))


def _snapshot() -> dict[str, Any]:
    if os.environ.get("REGRESSION_SNAPSHOT") == "write":
        SNAPSHOT.write_text(json.dumps({k: _dump(f()) for k, f in CASES.items()}, indent=1, allow_nan=True) + "\n")
    return json.loads(SNAPSHOT.read_text())


@pytest.fixture(scope="module")
def snapshot() -> dict[str, Any]:
    return _snapshot()


def test_the_snapshot_covers_every_case_and_every_prediction_kind(snapshot):
    assert sorted(snapshot) == sorted(CASES)
    kinds = {p["kind"] for v in snapshot.values() for p in (v.get("analysis") or v)["predictions"]}
    assert kinds == {"increase", "decrease", "equivalent", "interaction", "launches"}
    methods = {(v.get("analysis") or v)["details"]["method"] for v in snapshot.values()}
    assert methods == {"welch", "rank", "bootstrap", "anytime"}
    verdicts = {(v.get("analysis") or v)["verdict"] for v in snapshot.values()}
    assert verdicts == {"supported", "refuted", "inconclusive"}


@pytest.mark.parametrize("case", list(CASES))
def test_the_analysis_is_unchanged(case, snapshot):
    got = _dump(CASES[case]())
    want = snapshot[case]
    # text, verdicts and the order of keys exactly; numbers within audit's tolerance, NaN only where NaN was
    difference = first_difference(got, want)
    assert difference is None, f"{case}: {difference}"
