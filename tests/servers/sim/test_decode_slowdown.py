"""The sim's planted-regression test knob: --sim-decode-slowdown F makes every decode step F times as long (off at
1.0), the knob a bisection's calibration and end-to-end test plant a known change with; prefill is untouched."""

from __future__ import annotations

import pytest

from framework.servers.sim import model
from framework.servers.sim.args import parse_server_args
from framework.servers.sim.info import sim_backend_info
from framework.servers.sim.profile import load_profile


@pytest.mark.parametrize("extra", [[], ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
                                        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                        "--speculative-num-draft-tokens", "4"]])
def test_decode_steps_scale_and_prefill_does_not(extra: list[str]) -> None:
    profile = load_profile("rtx_pro_6000_tp8")
    base = parse_server_args(["--tp-size", "8", *extra], require_model_path=False)
    slow = parse_server_args(["--tp-size", "8", *extra, "--sim-decode-slowdown", "1.03"], require_model_path=False)
    assert base.sim_decode_slowdown == 1.0 and slow.sim_decode_slowdown == 1.03
    for batch in (1, 8):
        assert model.decode_step(profile, slow, batch).total_us == pytest.approx(
            1.03 * model.decode_step(profile, base, batch).total_us, rel=1e-12)
    assert model.prefill_step(profile, slow, 128).total_us == model.prefill_step(profile, base, 128).total_us
    assert "sim_decode_slowdown" not in sim_backend_info(profile, base)
    assert sim_backend_info(profile, slow)["sim_decode_slowdown"] == 1.03
