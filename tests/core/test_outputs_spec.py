"""The `outputs` prediction in the DSL: its shape, its bound, and that its conditions must pair prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from framework.core.outputs import capture_conditions, pairing_problem
from framework.core.spec import Experiment, Hypothesis, load_hypothesis
from framework.core.workload import Workload, make_plan
from framework.errors import SpecError


def spec(prediction: dict, levels: dict | None = None, analysis: str = "welch") -> dict:
    return {"name": "h", "statement": "s", "experiment": "e",
            "factors": {"spec": {"reference": "off", "levels": levels or {"off": {}, "on": {}}}},
            "predictions": [prediction], "design": {"analysis": analysis}}


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_shape_other_helpers_write_reads_and_defaults_to_every_request_identical(tmp_path):
    h = load_hypothesis(write(tmp_path, spec({"id": "same", "kind": "outputs", "factor": "spec", "level": "on"})))
    assert h.predictions[0].kind == "outputs" and h.predictions[0].min_agreement == 1.0
    assert capture_conditions(h) == {0, 1}


@pytest.mark.parametrize("bad", [0, 1.5, -0.1])
def test_min_agreement_outside_zero_one_is_refused_in_one_line(tmp_path, bad):
    path = write(tmp_path, spec({"id": "same", "kind": "outputs", "factor": "spec", "level": "on",
                                 "min_agreement": bad}))
    with pytest.raises(SpecError, match=r"predictions\[0\]\.min_agreement: min_agreement is the share"):
        load_hypothesis(path)


def test_a_bound_below_one_under_anytime_is_refused(tmp_path):
    path = write(tmp_path, spec({"id": "same", "kind": "outputs", "factor": "spec", "level": "on",
                                 "min_agreement": 0.9}, analysis="anytime"))
    with pytest.raises(SpecError, match="no anytime-valid test"):
        load_hypothesis(path)


def test_unknown_kind_lists_outputs():
    with pytest.raises(SpecError, match="'outputs'"):
        from framework.core.spec import validate_model
        validate_model(Hypothesis, spec({"id": "x", "kind": "nope"}), "h.yaml")


def _pair(levels: dict, workload: dict) -> tuple[str, str] | None:
    h = Hypothesis.model_validate(spec({"id": "same", "kind": "outputs", "factor": "spec", "level": "on"}, levels))
    return pairing_problem(h, Experiment(name="e", model_path="m", workload=Workload.model_validate(workload)))


def test_prompts_drawn_from_each_launchs_seed_cannot_pair():
    problem = _pair({"off": {}, "on": {}}, {})
    assert problem is not None and problem[0] == "predictions[0]" and "set workload.prompt_seed" in problem[1]


def test_a_level_that_changes_the_prompts_cannot_pair_but_one_that_changes_temperature_can():
    base = {"prompt_seed": 7, "prompt": "text"}
    problem = _pair({"off": {}, "on": {"workload": {"prompt_tokens": 64}}}, base)
    assert problem is not None and "differ in workload.prompt_tokens" in problem[1]
    assert _pair({"off": {}, "on": {"workload": {"temperature": 0.8}}}, base) is None


def test_a_prompt_seed_gives_every_launch_the_same_prompts_and_keeps_the_launch_seeds_schedule():
    w = Workload(prompt="text", prompt_seed=7, request_rate=5.0, output_tokens={"dist": "uniform", "low": 2,
                                                                               "high": 40})
    a, b = make_plan(w, requests_n=6, warmup=1, seed=1), make_plan(w, requests_n=6, warmup=1, seed=2)
    assert [(r.prompt, r.output_tokens) for r in a.requests] == [(r.prompt, r.output_tokens) for r in b.requests]
    assert a.resolved["schedule_sha256"] != b.resolved["schedule_sha256"]
    plain = Workload(prompt="text")
    assert make_plan(plain, requests_n=2, warmup=0, seed=1).requests[0].prompt != \
        make_plan(plain, requests_n=2, warmup=0, seed=2).requests[0].prompt
    assert "prompt_seed" not in make_plan(plain, requests_n=1, warmup=0, seed=1).resolved["workload"]
