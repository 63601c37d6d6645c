"""Planning with a twin's uncertainty: a twin whose estimate sits one standard error off a known truth makes the
point-prediction plan under-ask; the propagated plan asks at least what the truth needs, says how likely each
verdict is, and says it cannot where the twin cannot tell the verdict or lacks a parameter."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from framework.analysis import planning, twin_assurance
from framework.core.design import conditions
from framework.core.spec import load_hypothesis
from framework.core.twin import MetricNoise, TwinConfig, blank
from framework.servers.sim.adapter import twin_predict

MIN_EFFECT = 0.10  # two threads raise decode tok/s by more than 10%: exponent > log2(1.1) = 0.1375
TRUE_EXPONENT, SE = 0.25, 0.10  # the truth: 2 ** 0.25 = 1.19
LAUNCH_SD, REQUEST_SD, REQUESTS = 0.05, 0.03, 4
HYPOTHESIS = f"""\
name: twin_threads
statement: two threads decode faster
rationale: a known twin
experiment: tiny_llama_cpu
metric: decode_tok_s
factors:
  threads:
    reference: one
    levels:
      one: {{server_args: [--n_threads, "1"]}}
      two: {{server_args: [--n_threads, "2"]}}
predictions:
  - {{id: two_threads_faster, kind: increase, factor: threads, level: two, min_effect: {MIN_EFFECT}}}
design: {{launches: 3, requests: {REQUESTS}, warmup: 1, seed: 1}}
"""


def _twin(exponent: float, se: float = SE, identified: tuple[str, ...] = ("decode_step_us", "prefill_base_us",
                                                                           "thread_exponent")):
    values = {"decode_step_us": 2000.0, "prefill_base_us": 15000.0, "thread_exponent": exponent}
    fit = blank("llamacpp", "known", reference_threads=1).with_values(values)
    params = {k: p.model_copy(update={"identifiable": k in identified and k in values,
                                      "se": {"thread_exponent": se}.get(k, values.get(k, 0) * 0.01)})
              for k, p in fit.parameters.items()}
    free = [k for k in values if k in identified]
    cov = {a: {b: (params[a].se ** 2 if a == b else 0.0) for b in free} for a in free}
    nz = MetricNoise(launch_log_sd=LAUNCH_SD, request_log_sd=REQUEST_SD, residual_log_sd=LAUNCH_SD, residual_df=20,
                     launches=24, requests=96)
    return fit.model_copy(update={"parameters": params, "covariance": cov, "noise": {"tpot_s": nz, "ttft_s": nz}})


@pytest.fixture()
def hypothesis(tmp_path: Path):
    path = tmp_path / "twin_threads.yaml"
    path.write_text(HYPOTHESIS)
    return load_hypothesis(path)


def _configs(h) -> dict[int, TwinConfig]:
    return {c.index: TwinConfig(engine="llamacpp", flags=["--n_threads", "1" if c.levels["threads"] == "one" else "2"],
                                prompt_tokens=16, output_tokens=32, requests=REQUESTS, warmup=1)
            for c in conditions(h)}


def _point_launches(h, fit) -> int:
    means = {c: twin_predict(fit, cfg)["decode_tok_s"] for c, cfg in _configs(h).items()}
    rows = planning.plan(h, means=means, sd_launch_log=LAUNCH_SD, sd_request_log=REQUEST_SD, requests=REQUESTS,
                         power=0.9, alpha=0.05)
    return rows[0].launches_per_condition


def _propagated(h, fit, blocked=None):
    conds = {c: ("twin", fit, cfg) for c, cfg in _configs(h).items()}
    draws = twin_assurance.condition_draws(conds, "decode_tok_s", twin_predict, requests=REQUESTS, blocked=blocked)
    return twin_assurance.assurance(h, draws, sd_launch_log=LAUNCH_SD, sd_request_log=REQUEST_SD, requests=REQUESTS,
                                    power=0.9, alpha=0.05, blocked=blocked)


def test_the_point_plan_under_asks_and_the_propagated_plan_does_not(hypothesis) -> None:
    fitted = _twin(TRUE_EXPONENT + SE)  # the fit's estimate one standard error above the truth
    truth = _twin(TRUE_EXPONENT)
    point, needed = _point_launches(hypothesis, fitted), _point_launches(hypothesis, truth)
    assert point < needed  # the point plan takes the estimate as exact, and asks too few
    (row,) = _propagated(hypothesis, fitted)
    assert row.launches_per_condition is not None and row.launches_per_condition >= needed, row
    # the share of draws whose truth implies "supported": P(exponent > log2 1.1) under N(0.35, 0.1) (scipy)
    expected = stats.norm.sf(math.log2(1 + MIN_EFFECT), loc=TRUE_EXPONENT + SE, scale=SE)
    assert row.implied["supported"] == pytest.approx(expected, abs=0.04)
    assert row.assurance is not None and 0.8 < row.assurance <= 1.0
    assert sum(row.verdicts.values()) == pytest.approx(1.0)
    # the truth's own power at the propagated n reaches the target
    means = {c: twin_predict(truth, cfg)["decode_tok_s"] for c, cfg in _configs(hypothesis).items()}
    comp = planning.comparison(hypothesis, hypothesis.predictions[0], means)
    var = LAUNCH_SD ** 2 + REQUEST_SD ** 2 / REQUESTS
    pw = planning.power_of(comp.rule, effect_log=comp.effect_log, var_cells=[var, var], weights=list(comp.weights),
                           n=row.launches_per_condition, a=0.05, low=comp.low, high=comp.high, target="supported")
    assert pw >= 0.9


def test_a_twin_that_cannot_tell_the_verdict_says_so(hypothesis) -> None:
    on_threshold = _twin(math.log2(1 + MIN_EFFECT), se=0.02)  # half its draws on either side of 10%, near it
    (row,) = _propagated(hypothesis, on_threshold)
    assert row.launches_per_condition is None and "cannot reach power" in row.note
    assert 0.35 < row.implied["supported"] < 0.65


def test_a_metric_that_needs_an_unidentified_parameter_is_not_propagated(hypothesis) -> None:
    fit = _twin(0.35, identified=("decode_step_us", "prefill_base_us"))
    (row,) = _propagated(hypothesis, fit, blocked={1: ["thread_exponent"]})
    assert row.launches_per_condition is None and "needs thread_exponent" in row.note


def test_parameter_draws_follow_the_fits_covariance() -> None:
    fit = _twin(0.35)
    draws = twin_assurance.parameter_draws(fit, draws=4000)
    x = np.asarray([d["thread_exponent"] for d in draws])
    assert x.mean() == pytest.approx(0.35, abs=4 * SE / math.sqrt(4000))
    assert x.std(ddof=1) == pytest.approx(SE, rel=0.05)
    assert all(d["decode_step_us"] > 0 for d in draws)
    assert twin_assurance.parameter_draws(fit, draws=5) == twin_assurance.parameter_draws(fit, draws=5)  # seeded


def test_the_linear_draws_agree_with_replaying_the_twin_at_every_draw(hypothesis) -> None:
    fit = _twin(0.35)
    conds = {c: ("twin", fit, cfg) for c, cfg in _configs(hypothesis).items()}
    fast = twin_assurance.condition_draws(conds, "decode_tok_s", twin_predict, draws=40, requests=REQUESTS)
    slow = twin_assurance.condition_draws(conds, "decode_tok_s", twin_predict, draws=40, requests=REQUESTS,
                                          exact=True)
    for a, b in zip(fast, slow, strict=True):
        for c in a:
            assert a[c] == pytest.approx(b[c], rel=0.01)
