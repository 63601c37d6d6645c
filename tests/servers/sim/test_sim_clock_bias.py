"""The sim's measured clock bias: the model's step-time change for a short batch, and which decisions it could move."""

from __future__ import annotations

import pytest
from cli_helpers import ROOT

from framework.core.spec import load_hypothesis
from framework.servers.sim import model
from framework.servers.sim.args import parse_server_args
from framework.servers.sim.fidelity import decision_could_move
from framework.servers.sim.profile import load_profile


def test_batch_bias_is_zero_at_the_nominal_batch_and_grows_with_the_shortfall():
    prof = load_profile("rtx_pro_6000_tp8")
    args = parse_server_args(["--model-path", "m", "--tp-size", "8"])
    assert model.batch_bias(prof, args, 64, 64.0) == 0.0
    assert model.batch_bias(prof, args, 1, 1.0) == 0.0
    short, shorter = model.batch_bias(prof, args, 64, 60.0), model.batch_bias(prof, args, 64, 41.0)
    assert 0 < short < shorter
    assert shorter == pytest.approx(model.decode_step(prof, args, 64).total_us
                                    / model.decode_step(prof, args, 41).total_us - 1)
    spec = parse_server_args(["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                              "--speculative-eagle-topk", "1"])
    assert model.batch_bias(prof, spec, 64, 48.0) == 0.0  # SGLang caps speculative decoding at 48 running


def test_a_decision_is_unreliable_only_when_the_bias_reaches_a_threshold():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    neutral = {"id": "neutral_for_baseline", "kind": "equivalent", "ci": [0.985, 1.02]}  # margin 0.03
    assert not decision_could_move(h, neutral, 0.001)
    assert decision_could_move(h, neutral, 0.01)   # 1.02 x 1.01^2 > 1.03
    helps = {"id": "helps_eagle3", "kind": "increase", "ci": [1.75, 1.88]}  # threshold 1.10
    assert not decision_could_move(h, helps, 0.05)
    assert decision_could_move(h, {**helps, "ci": [1.12, 1.3]}, 0.02)
    inter = {"id": "helps_eagle3_more_than_baseline", "kind": "interaction", "ci": [1.13, 1.9]}
    assert decision_could_move(h, inter, 0.01)     # four conditions: 1.13 / 1.01^4 < 1.10
    assert not decision_could_move(h, {"id": "x", "kind": "launches", "ci": None}, 0.5)


def test_open_loop_lateness_on_the_model_clock_is_measured_per_launch():
    from framework.servers.sim.fidelity import sim_open_loop_lateness

    def row(launch: str, scheduled: float, arrived: float) -> dict:
        return {"kind": "request", "ok": True, "clock": "sim_model", "launch_id": launch, "scheduled_s": scheduled,
                "model_start_s": arrived, "e2e_s": 1.0}

    rows = [row("a", 0.0, 5.0), row("a", 1.0, 6.0), row("a", 2.0, 7.5), row("b", 0.0, 0.0), row("b", 1.0, 1.1)]
    late = sim_open_loop_lateness(rows)
    assert late["max_s"] == pytest.approx(0.5) and late["median_s"] == pytest.approx(0.0)
    assert sim_open_loop_lateness([{**rows[0], "clock": "wall"}]) is None
