"""An unidentified spec overhead at the pilot's own verify width is held by the fitted terms (d0 + d1 (T - 1) + o
was measured there as one sum): the prediction gets an interval there, and none at another stream count."""

from __future__ import annotations

from framework.analysis import twinfit
from framework.core.twin import Parameter, TwinConfig, blank, domain_of
from framework.servers.sim.adapter import twin_predict

SPEC = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"]


def _fit(configs: list[TwinConfig]):
    values = {"decode_step_us": 2900.0, "decode_us_per_token": 450.0, "prefill_base_us": 40000.0,
              "prefill_us_per_token": 100.0, "accept_length": 2.0}
    fit = blank("gpu", "t", None).with_values(values)
    params = {n: (Parameter(estimate=values[n], se=values[n] * 0.01, identifiable=True) if n in values
                  else Parameter(estimate=None, identifiable=False)) for n in fit.parameters}
    cov = {a: {b: ((values[a] * 0.01) ** 2 if a == b else 0.0) for b in values} for a in values}
    return fit.model_copy(update={"parameters": params, "covariance": cov, "domain": domain_of(configs)})


def test_spec_overhead_is_absorbed_only_at_the_pilots_stream_count() -> None:
    pilot = [TwinConfig(engine="gpu", flags=f, concurrency=1, prompt_tokens=64, output_tokens=32, requests=4,
                        warmup=1) for f in ([], SPEC)]
    fit = _fit(pilot)
    same = twinfit.predict_interval(fit, pilot[1].model_copy(update={"prompt_tokens": 64}), twin_predict,
                                    metrics=("tpot_s",))["tpot_s"]
    assert same["low"] is not None and same["not_identified"] == []
    other = twinfit.predict_interval(fit, pilot[1].model_copy(update={"concurrency": 2}), twin_predict,
                                     metrics=("tpot_s",))["tpot_s"]
    assert other["low"] is None and "spec_overhead_us" in other["not_identified"]
