"""A twin read from a file is bounded (issue 31): each value finite and in its physical range, or one reason."""

from __future__ import annotations

import math

import pytest
import yaml
from cli_helpers import ROOT

from framework.core.twin import TwinFit, blank, bounds_problem

SHIPPED = [ROOT / "docs" / "results" / "twin" / name / "twin.yaml" for name in ("llamacpp", "vllm")]


@pytest.mark.parametrize("path", SHIPPED, ids=["llamacpp", "vllm"])
def test_the_shipped_twins_are_within_bounds(path):
    assert bounds_problem(TwinFit.model_validate(yaml.safe_load(path.read_text()))) is None


def test_each_value_out_of_bounds_is_named_with_its_range():
    fit = TwinFit.model_validate(yaml.safe_load(SHIPPED[0].read_text()))
    p = fit.parameters

    def with_param(name: str, **update) -> TwinFit:
        return fit.model_copy(update={"parameters": {**p, name: p[name].model_copy(update=update)}})

    cases = [
        (with_param("decode_step_us", se=math.nan),
         "parameters.decode_step_us.se must be a finite number in [0, 1e+12]"),
        (with_param("thread_exponent", estimate=3.5), "parameters.thread_exponent.estimate must be a finite number in "
                                                      "[-2, 3] (got 3.5)"),
        (with_param("prefill_base_us", estimate=0.0), "parameters.prefill_base_us.estimate must be > 0 to serve"),
        (fit.model_copy(update={"covariance": {"a": {"b": math.inf}}}), "covariance.a.b must be a finite number"),
        (fit.model_copy(update={"fixed": {"tp_size": True}}), "fixed.tp_size must be a whole number from 1 to 1024"),
        (fit.model_copy(update={"fixed": {"launch_startup_s": -1.0}}), "fixed.launch_startup_s must be a finite number "
                                                                       "in [0, 3600]"),
    ]
    for twin, says in cases:
        assert (bounds_problem(twin) or "").startswith(says), (says, bounds_problem(twin))
    # a blank twin serves nothing: every request would take no time
    assert "decode_step_us.estimate must be > 0" in (bounds_problem(blank("vllm")) or "")
