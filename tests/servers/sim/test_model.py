"""The pure performance model: the seed's four numbers, overlap, symm-mem no-op, batching, noise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from framework.servers.sim import model
from framework.servers.sim.args import parse_server_args
from framework.servers.sim.expected import expected_metrics
from framework.servers.sim.profile import ProfileError, available_profiles, load_profile, resolve_profile_path

E3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-num-steps", "3",
      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
FUSION = ["--enable-flashinfer-allreduce-fusion"]
SEED = [([], 92.6), (FUSION, 92.7), (E3, 54.1), (E3 + FUSION, 96.1)]


@pytest.mark.parametrize("flags,target", SEED)
def test_seed_numbers_from_expected_metrics(flags, target):
    m = expected_metrics("rtx_pro_6000_tp8", flags, prompt_tokens=128, output_tokens=256)
    assert m["decode_tok_s"] == pytest.approx(target, rel=0.005)


def test_profiles_load():
    assert {"rtx_pro_6000_tp8", "rtx_pro_6000_tp8_cu128", "h200_tp8"} <= set(available_profiles())
    with pytest.raises(ProfileError):
        resolve_profile_path("no_such_profile")


def test_fusion_is_neutral_for_plain_decode_because_of_overlap():
    p = load_profile("rtx_pro_6000_tp8")
    base = model.decode_step(p, parse_server_args(["--model-path", "m"]), 1)
    fused = model.decode_step(p, parse_server_args(["--model-path", "m", *FUSION]), 1)
    assert base.compute_us > base.allreduce_us  # overlapped: compute hides the all-reduces
    assert fused.total_us / base.total_us == pytest.approx(1.0, abs=0.003)
    e3 = model.decode_step(p, parse_server_args(["--model-path", "m", *E3]), 1)
    e3f = model.decode_step(p, parse_server_args(["--model-path", "m", *E3, *FUSION]), 1)
    assert e3.total_us / e3f.total_us > 1.5  # verify is all-reduce-latency bound


def test_torch_symm_mem_is_a_noop_on_sm120_but_not_on_h200():
    for prof, expect_noop in (("rtx_pro_6000_tp8", True), ("h200_tp8", False)):
        p = load_profile(prof)
        off = model.decode_step(p, parse_server_args(["--model-path", "m", *E3, "--disable-custom-all-reduce"]), 1)
        on = model.decode_step(p, parse_server_args(["--model-path", "m", *E3, "--disable-custom-all-reduce",
                                                     "--enable-torch-symm-mem"]), 1)
        assert (on.total_us == off.total_us) is expect_noop
        assert (on.allreduce_impl == "nccl") is expect_noop


def test_custom_allreduce_default_on_nvlink_only():
    h = load_profile("h200_tp8")
    assert model.allreduce(h, parse_server_args(["--model-path", "m"]), 14336)[0] == "custom"
    no_custom = parse_server_args(["--model-path", "m", "--disable-custom-all-reduce"])
    assert model.allreduce(h, no_custom, 14336)[0] == "nccl"
    rtx = load_profile("rtx_pro_6000_tp8")
    assert model.allreduce(rtx, parse_server_args(["--model-path", "m"]), 14336)[0] == "nccl"


def test_cu128_fusion_is_a_startup_failure():
    p = load_profile("rtx_pro_6000_tp8_cu128")
    assert "No supported CUDA architectures found for major versions [9, 10]" in model.startup_failure(
        p, parse_server_args(["--model-path", "m", *FUSION]))
    assert model.startup_failure(p, parse_server_args(["--model-path", "m"])) is None
    rtx = load_profile("rtx_pro_6000_tp8")
    assert model.startup_failure(rtx, parse_server_args(["--model-path", "m", *FUSION])) is None


@pytest.mark.parametrize("flags", [[], E3])
def test_batching_increases_step_time_and_cuda_graph_limit(flags):
    p = load_profile("rtx_pro_6000_tp8")
    a = parse_server_args(["--model-path", "m", *flags, "--cuda-graph-max-bs", "16"])
    times = [model.decode_step(p, a, b).total_us for b in (1, 2, 4, 8, 16, 32)]
    assert times == sorted(times) and times[-1] > times[0]
    no_graph = parse_server_args(["--model-path", "m", *flags, "--disable-cuda-graph"])
    assert model.decode_step(p, no_graph, 1).total_us > model.decode_step(p, a, 1).total_us


def test_ttft_is_prefill_scale():
    m = expected_metrics("rtx_pro_6000_tp8", [], 128, 256)
    assert 0.03 < m["ttft_s"] < 0.08
    assert expected_metrics("rtx_pro_6000_tp8", [], 1024, 256)["ttft_s"] > m["ttft_s"]


def test_expected_metrics_concurrency_and_noise_fields():
    one = expected_metrics("rtx_pro_6000_tp8", E3 + FUSION, 128, 256)
    many = expected_metrics("rtx_pro_6000_tp8", E3 + FUSION, 128, 256, concurrency=8)
    assert many["decode_tok_s"] < one["decode_tok_s"]
    assert one["launch_log_sd"] == pytest.approx(0.006) and one["request_log_sd"] == pytest.approx(0.004)
    assert one["accept_length"] == pytest.approx(2.35)
    quiet = expected_metrics("rtx_pro_6000_tp8", E3 + ["--sim-noise-scale", "0"], 128, 256)
    assert quiet["launch_log_sd"] == 0 and quiet["slow_launch_prob"] == 0


def _draws(seed: int) -> list[float]:
    p = load_profile("rtx_pro_6000_tp8")
    a = parse_server_args(["--model-path", "m", *E3])
    rng = np.random.default_rng(seed)
    launch = model.draw_launch(p, 1.0, rng)
    reqs = [model.draw_request(p, a, 1.0, rng) for _ in range(5)]
    return [launch.factor] + [r.time_factor for r in reqs] + [r.accept_mean for r in reqs]


def test_noise_reproducible_per_seed():
    assert _draws(7) == _draws(7)
    assert _draws(7) != _draws(8)


def test_noise_magnitudes_and_accept_mean():
    p = load_profile("rtx_pro_6000_tp8")
    a = parse_server_args(["--model-path", "m", *E3])
    spec = model.spec_config(p, a)
    rng = np.random.default_rng(1)
    offsets = np.log([model.draw_launch(p, 1.0, rng).factor for _ in range(4000)])
    assert np.median(np.abs(offsets)) == pytest.approx(0.006 * 0.674, rel=0.15)
    assert 0.01 < np.mean(offsets > np.log(1.05)) < 0.06  # the occasional slow launch
    req = model.draw_request(p, a, 0.0, rng)
    accepts = [model.sample_accepts(rng, req.alpha, spec) for _ in range(20000)]
    assert np.mean(accepts) == pytest.approx(2.35, rel=0.02)
    assert max(accepts) == 4 and min(accepts) == 1
    assert model.draw_launch(p, 0.0, rng).factor == 1.0


@given(st.floats(1.0, 4.0), st.integers(0, 500))
def test_deterministic_accepts_track_the_mean(mean, n):
    total = sum(model.deterministic_accepts(mean, i) for i in range(n))
    assert abs(total - n * mean) <= 1.0 + 1e-6


@settings(max_examples=50)
@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(-1e3, 1e3)), min_size=2, max_size=6, unique_by=lambda t: t[0]),
       st.floats(0, 2e6))
@example([(0.0, 0.0), (5e-324, 1.5)], 5e-324)  # a subnormal segment once gave 2.0 here (issue 15)
def test_interp_passes_through_points_and_is_bounded_inside(points, x):
    table = sorted(points)
    for px, py in table:
        assert model.interp(table, px) == pytest.approx(py, abs=1e-6)
    if table[0][0] <= x <= table[-1][0]:
        ys = [y for _, y in table]
        assert min(ys) - 1e-6 <= model.interp(table, x) <= max(ys) + 1e-6


def test_unknown_flag_exits_2():
    with pytest.raises(SystemExit) as exc:
        parse_server_args(["--model-path", "m", "--no-such-flag"])
    assert exc.value.code == 2


def test_spec_defaults_follow_sglang():
    p = load_profile("rtx_pro_6000_tp8")
    s = model.spec_config(p, parse_server_args(["--model-path", "m", "--speculative-algorithm", "EAGLE3"]))
    assert (s.num_steps, s.topk, s.num_draft_tokens) == (3, 1, 4)
    s5 = model.spec_config(p, parse_server_args(["--model-path", "m", "--speculative-algorithm", "EAGLE",
                                                 "--speculative-num-steps", "5", "--speculative-eagle-topk", "1"]))
    assert s5.num_draft_tokens == 6 and model.profile_accept_mean(p, s5) > 2.35


def test_request_log_sd_is_larger_for_eagle3_and_zero_without_noise():
    from framework.servers.sim.model import request_log_sd
    from framework.servers.sim.profile import load_profile

    prof = load_profile("rtx_pro_6000_tp8")
    eagle = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]
    plain = request_log_sd(prof, [], 256, n=100)
    spec = request_log_sd(prof, eagle, 256, n=100)
    assert 0 < plain < 0.02 and spec > 3 * plain
    assert request_log_sd(prof, eagle + ["--sim-noise-scale", "0"], 256, n=20) < 1e-12
