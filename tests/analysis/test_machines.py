"""The machine as a random effect (rules version 3): one machine changes nothing, two or more decide on the
machines' contrasts with m - 1 df, confounded machines are inconclusive, a zero variance is at the boundary."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from stats_rows import simulate

from framework.analysis import machines
from framework.analysis.ruleset import RULESETS
from framework.analysis.verdicts import analyze
from framework.core.spec import Hypothesis, load_hypothesis

ROOT = Path(__file__).resolve().parents[2]
SEED_MEANS = {0: 92.6, 1: 54.1, 2: 92.7, 3: 96.1}
EAGLE_SD = {0: 0.004, 1: 0.04, 2: 0.004, 3: 0.04}


@pytest.fixture(scope="module")
def eagle() -> Hypothesis:
    return load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")


def two_cell() -> Hypothesis:
    """One factor, one increase prediction: the smallest comparison."""
    return Hypothesis.model_validate({
        "name": "m", "statement": "on is faster", "experiment": "rtx_pro_6000_tp8",
        "factors": {"x": {"reference": "off", "levels": {"off": {}, "on": {}}}},
        "predictions": [{"id": "faster", "kind": "increase", "factor": "x", "level": "on", "min_effect": 0.05}]})


def on_machines(rows: list[dict], m: int, *, sd_machine: float = 0.0, sd_effect: float = 0.0, seed: int = 0,
                by_condition: bool = False) -> list[dict]:
    """The rows with launch replicate r on machine r mod m (or, `by_condition`, condition c on machine c mod m),
    each machine's requests moved by its own factor and each (machine, condition) by another."""
    rng = np.random.default_rng(seed)
    b = rng.normal(0, sd_machine, m)
    g = rng.normal(0, sd_effect, (m, 8))
    where: dict[str, int] = {}
    out = []
    for r in rows:
        if r["kind"] == "launch":
            j = (r["condition"] if by_condition else r["replicate"]) % m
            where[r["launch_id"]] = j
            out.append({**r, "machine": {"id": f"machine-{j}"}})
        elif r["kind"] == "request":
            j = where[r["launch_id"]]
            out.append({**r, "decode_tok_s": r["decode_tok_s"] * math.exp(b[j] + g[j, r["condition"]])})
        else:
            out.append(r)
    return out


def test_one_machine_decides_exactly_as_before(eagle):
    rows = on_machines(simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=1), 1, sd_machine=0.1)
    v2, v3 = analyze(eagle, rows, ruleset=RULESETS[2]), analyze(eagle, rows, ruleset=RULESETS[3])
    assert v3.verdict == v2.verdict
    for p2, p3 in zip(v2.predictions, v3.predictions, strict=True):
        assert (p3.verdict, p3.estimate, p3.ci, p3.p_value) == (p2.verdict, p2.estimate, p2.ci, p2.p_value)
        assert p3.details["population"] == "this machine" and "population" not in p2.details
    assert v3.details["population"]["scope"] == "this machine"
    assert "population" not in v2.details


def test_two_machines_widen_the_interval_to_one_degree_of_freedom(eagle):
    """An effect that differs between machines (log-sd 0.05 per machine and condition): the fleet's interval has
    1 df and is far wider than the launches-only one, which takes two machines' launches as one population."""
    rows = on_machines(simulate(eagle, SEED_MEANS, launches=6, sd_request=EAGLE_SD, seed=2), 2, sd_effect=0.05,
                       seed=3)
    v2, v3 = analyze(eagle, rows, ruleset=RULESETS[2]), analyze(eagle, rows, ruleset=RULESETS[3])
    p2, p3 = v2.predictions[1], v3.predictions[1]  # helps_eagle3
    assert p3.details["method"] == "machine_means" and p3.details["df"] == 1
    assert p3.details["population"] == "2 machines"
    width = {k: math.log(p.ci[1] / p.ci[0]) for k, p in (("v2", p2), ("v3", p3))}
    assert width["v3"] > 2 * width["v2"]
    lo, hi = p3.details["log_ci"]  # the 90% interval: t(0.95, 1) = 6.314 standard errors either side
    assert (hi - lo) / 2 == pytest.approx(6.3138 * p3.details["se"], rel=1e-4)
    d = p3.details["machine"]["machine_effects"]
    assert p3.details["log_estimate"] == pytest.approx(np.mean(list(d.values())))
    assert v3.details["population"] == {"scope": "2 machines", "machines": 2,
                                        "launches_by_machine": {"machine-0": 12, "machine-1": 12}}


def test_a_machine_that_is_faster_at_everything_cancels(eagle):
    """A machine main effect alone (log-sd 0.1, every condition alike) cancels from the machines' own contrasts,
    where the launches-only analysis counts it as launch noise; the record reports it as the machine variance."""
    rows = on_machines(simulate(eagle, SEED_MEANS, launches=6, sd_request=EAGLE_SD, seed=2), 2, sd_machine=0.1,
                       seed=3)
    v2, v3 = analyze(eagle, rows, ruleset=RULESETS[2]), analyze(eagle, rows, ruleset=RULESETS[3])
    p2, p3 = v2.predictions[1], v3.predictions[1]
    assert math.log(p3.ci[1] / p3.ci[0]) < math.log(p2.ci[1] / p2.ci[0])
    assert v3.details["variance"]["machine"]["var_machine"] > 0.003


def test_conditions_on_different_machines_are_confounded(eagle):
    rows = on_machines(simulate(eagle, SEED_MEANS, sd_request=EAGLE_SD, seed=4), 2, by_condition=True)
    a = analyze(eagle, rows, ruleset=RULESETS[3])
    helps = a.predictions[1]  # conditions 1 and 3: machine 1 only, so both on one machine -> one-machine analysis
    neutral = a.predictions[0]  # conditions 0 (machine 0) and 2 (machine 0): one machine as well
    assert neutral.details["population"] == helps.details["population"] == "this machine"
    inter = a.predictions[2]  # all four cells: two machines, none measuring every cell
    assert inter.verdict == "inconclusive" and "confounded" in inter.reason
    assert inter.details["population"] == "2 machines"


def _rows(values: dict[tuple[str, int], list[float]]) -> list[dict]:
    """Launch and request rows of the two-cell hypothesis: {(machine, condition): launch values}."""
    out: list[dict] = []
    n = 0
    for (mach, c), vals in values.items():
        for v in vals:
            lid = f"c{c}-r{n}-a1"
            n += 1
            out.append({"kind": "launch", "launch_id": lid, "condition": c, "levels": {"x": ["off", "on"][c]},
                        "replicate": n, "block": n, "attempt": 1, "seed": n, "ok": True, "machine": {"id": mach},
                        "started": "t", "finished": "t"})
            out.append({"kind": "request", "trial_id": f"{lid}-q0", "launch_id": lid, "condition": c,
                        "levels": {"x": ["off", "on"][c]}, "index": 0, "warmup": False, "ok": True,
                        "decode_tok_s": v, "e2e_s": 1.0})
    return out


def test_a_zero_machine_variance_is_at_the_boundary_not_no_effect():
    h = two_cell()
    # the machines' effects (log 1.2 and log 1.21) differ far less than their launches scatter
    rows = _rows({("a", 0): [100, 110, 91], ("a", 1): [120, 132, 109.2],
                  ("b", 0): [100, 112, 90], ("b", 1): [121, 135.5, 108.9]})
    p = analyze(h, rows, ruleset=RULESETS[3]).predictions[0]
    assert p.details["machine"]["var_effect_between_machines"] == 0.0
    assert p.details["machine"]["machine_variance"] == machines.BOUNDARY
    assert "not 'no machine effect'" in machines.BOUNDARY


def test_machine_means_match_a_mixed_model_on_a_balanced_fleet():
    """statsmodels' MixedLM (REML, random machine intercept and random treatment slope) on a balanced design
    gives the same fixed effect as the machine-means estimator, and about the same standard error."""
    import pandas as pd
    import statsmodels.formula.api as smf

    h = two_cell()
    rng = np.random.default_rng(7)
    values: dict[tuple[str, int], list[float]] = {}
    for j in range(8):
        b, g = rng.normal(0, 0.1), rng.normal(0, 0.05)
        for c in (0, 1):
            values[(f"m{j}", c)] = [float(100 * math.exp(b + c * (0.2 + g) + rng.normal(0, 0.02))) for _ in range(3)]
    p = analyze(h, _rows(values), ruleset=RULESETS[3]).predictions[0]
    frame = pd.DataFrame([{"y": math.log(v), "treat": c, "machine": m} for (m, c), vs in values.items() for v in vs])
    fit = smf.mixedlm("y ~ treat", frame, groups=frame["machine"], re_formula="~treat").fit(reml=True)
    assert p.details["log_estimate"] == pytest.approx(fit.fe_params["treat"], abs=1e-6)
    assert p.details["se"] == pytest.approx(fit.bse_fe["treat"], rel=0.1)
    assert p.details["df"] == 7


def test_anytime_over_machines_takes_the_machine_as_the_unit_under_version_4():
    """Rules version 4 (`anytime_machines`): the anytime analysis of launches on 2 machines decides on the
    machine-level confidence sequence; version 3 keeps the pooled block contrasts and says so."""
    h = two_cell()
    rows = on_machines(simulate(h, {0: 100.0, 1: 100.0}, launches=8, seed=4), 2, sd_effect=0.1, seed=5)
    v3 = analyze(h, rows, method="anytime", ruleset=RULESETS[3]).predictions[0]
    v4 = analyze(h, rows, method="anytime", ruleset=RULESETS[4]).predictions[0]
    assert "(the anytime block contrasts do not model the machine)" in v3.details["population"]
    assert "unit" not in v3.details and v3.details["blocks"] == 8
    assert v4.details["population"] == "2 machines"
    assert v4.details["unit"] == "machine" and v4.details["machines"] == 2 and v4.details["rounds"] == 4
    assert v4.details["df"] == 1
    # the machine-level sequence is far wider than the pooled one (1 df, union over rounds)
    assert math.log(v4.ci[1] / v4.ci[0]) > 3 * math.log(v3.ci[1] / v3.ci[0])
    # conditions on different machines: confounded, inconclusive
    apart = on_machines(simulate(h, {0: 100.0, 1: 100.0}, launches=8, seed=4), 2, by_condition=True)
    p = analyze(h, apart, method="anytime", ruleset=RULESETS[4]).predictions[0]
    assert p.verdict == "inconclusive" and "only 0 completed a block of every one" in p.reason


def test_anytime_on_one_machine_is_unchanged_by_version_4():
    h = two_cell()
    rows = on_machines(simulate(h, {0: 100.0, 1: 106.0}, launches=6, seed=6), 1)
    v3 = analyze(h, rows, method="anytime", ruleset=RULESETS[3]).predictions[0]
    v4 = analyze(h, rows, method="anytime", ruleset=RULESETS[4]).predictions[0]
    assert (v4.verdict, v4.estimate, v4.ci, v4.p_value) == (v3.verdict, v3.estimate, v3.ci, v3.p_value)


def test_a_version_3_anytime_record_over_machines_recomputes_under_version_3():
    """What audit does: a record's own version recomputes it; today's (v4) differs on the same rows."""
    from framework.analysis import rules

    h = two_cell()
    rows = on_machines(simulate(h, {0: 100.0, 1: 100.0}, launches=8, seed=4), 2, sd_effect=0.1, seed=5)
    recorded = analyze(h, rows, method="anytime", ruleset=RULESETS[3]).predictions[0]
    again = rules.rules_for(3).analyze(h, rows, method="anytime").predictions[0]
    today = rules.rules_for(4).analyze(h, rows, method="anytime").predictions[0]
    assert (again.verdict, again.ci, again.p_value) == (recorded.verdict, recorded.ci, recorded.p_value)
    assert today.ci != recorded.ci and today.details["unit"] == "machine"


def test_a_verdict_over_machines_carries_the_next_machine():
    h = two_cell()
    rows = on_machines(simulate(h, {0: 100.0, 1: 110.0}, launches=6, seed=8), 3, sd_effect=0.05, seed=9)
    p = analyze(h, rows, ruleset=RULESETS[4]).predictions[0]
    nm = p.details["new_machine"]
    d = list(p.details["machine"]["machine_effects"].values())
    half = stats_t(0.95, 2) * float(np.std(d, ddof=1)) * math.sqrt(1 + 1 / 3)
    assert nm["log_interval"] == pytest.approx([np.mean(d) - half, np.mean(d) + half])
    assert nm["machines"] == 3 and nm["df"] == 2 and not nm["useful"] and nm["machines_for_useful"] == 8
    one = analyze(h, on_machines(simulate(h, {0: 100.0, 1: 110.0}, launches=6, seed=8), 1), ruleset=RULESETS[4])
    assert "new_machine" not in one.predictions[0].details


def stats_t(q: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))


def test_a_sequential_anytime_look_over_machines_uses_the_machine_sequence():
    """sequential_look under anytime (every look at the full alpha) decides over machines on the machine-level
    sequence too: its p-value is the union over rounds, min_k p_k / w_k, p_k the one-sample t test (scipy) against the
    threshold log(1.05) of the machines' running-mean contrasts at round k."""
    from scipy import stats

    from framework.analysis import rows as rows_mod
    from framework.analysis.verdicts import sequential_look
    from framework.stats.anytime_machines import round_weight

    h = two_cell()
    rows = on_machines(simulate(h, {0: 100.0, 1: 150.0}, launches=8, seed=10), 4, sd_effect=0.02, seed=11)
    analysis, stop, _ = sequential_look(h, rows, look=1, max_looks=4, method="anytime", ruleset=RULESETS[4])
    p = analysis.predictions[0]
    assert p.details["unit"] == "machine" and p.details["machines"] == 4 and p.details["rounds"] == 2
    assert analysis.details["sequential"]["spending"] == "none (anytime-valid)"
    assert p.verdict == "supported" and stop  # a 50% effect over 4 machines is decided at the first look
    data = rows_mod.group_rows(h, rows, RULESETS[4]).data
    per: dict[str, list[float]] = {}
    for blk in range(8):  # block b ran on machine b mod 4; contrast = log(treat) - log(base)
        t = [v for lid, v in zip(*data[1].logs(), strict=True) if lid.endswith(f"-r{blk}-a1")][0]
        b = [v for lid, v in zip(*data[0].logs(), strict=True) if lid.endswith(f"-r{blk}-a1")][0]
        per.setdefault(f"machine-{blk % 4}", []).append(t - b)
    ps = []
    for k in (1, 2):
        x = [float(np.mean(v[:k])) for _, v in sorted(per.items())]
        ps.append(stats.ttest_1samp(x, math.log(1.05), alternative="greater").pvalue / round_weight(k))  # min_effect
    assert p.p_value == pytest.approx(min(1.0, *ps), rel=1e-9)
def test_rules_v4_count_machines_by_hardware_and_name_the_labels(eagle):
    """Issue 31: two labels over one host's hardware are one machine under rules version 4 (a fleet of one,
    decided as one machine's launches), while version 3 keeps deciding the same rows as two machines."""
    from framework.core.machine import identity
    rows = on_machines(simulate(eagle, SEED_MEANS, launches=6, sd_request=EAGLE_SD, seed=2), 2, sd_effect=0.05,
                       seed=3)
    rows = [{**r, "machine": identity("vm", "AMD EPYC", [], label="ab"[int(r["machine"]["id"][-1])])}
            if r["kind"] == "launch" else r for r in rows]
    v2, v3, v4 = (analyze(eagle, rows, ruleset=RULESETS[v]) for v in (2, 3, 4))
    assert v3.details["population"]["machines"] == 2 and "labels_by_machine" not in v3.details["population"]
    assert v3.predictions[1].details["population"] == "2 machines" and v3.predictions[1].details["df"] == 1
    pop = v4.details["population"]
    assert pop["scope"] == "this machine" and pop["machines"] == 1
    assert list(pop["labels_by_machine"].values()) == [["a", "b"]]
    assert "labels a, b name one machine" in pop["labels_note"]
    for p2, p4 in zip(v2.predictions, v4.predictions, strict=True):  # one machine: the launch-level analysis
        assert (p4.verdict, p4.estimate, p4.ci) == (p2.verdict, p2.estimate, p2.ci)
    # two hosts stay two machines under version 4, whatever their labels
    apart = [{**r, "machine": identity(f"host-{r['machine']['label']}", "AMD EPYC", [], label="same")}
             if r["kind"] == "launch" else r for r in rows]
    assert analyze(eagle, apart, ruleset=RULESETS[4]).details["population"]["machines"] == 2
