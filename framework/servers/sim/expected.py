"""What the sim serves a closed loop, noise off: the planner's expectations (`plan` plans for these).

Apart from `model` because it replays the engine's schedule (`served`), which itself is built on the
model; docs/model.md, "expected_metrics".
"""

from __future__ import annotations

from framework.core import metrics as metrics_mod
from framework.servers.sim import model
from framework.servers.sim.profile import Profile, load_profile
from framework.servers.sim.served import closed_loop_rows


def expected_metrics(profile: Profile | str, server_flags: list[str], prompt_tokens: int,
                     output_tokens: int, concurrency: int = 1, *, requests: int = 3,
                     warmup: int = 1) -> dict[str, float | str | None]:
    """Noise-free expectations of what the client measures, plus the noise magnitudes (for planning).

    The figures are what the sim serves a closed loop of ``concurrency`` streams with its noise off:
    the engine's own schedule replayed step for step (:mod:`framework.servers.sim.served`; the first
    burst at once, each successor the instant its predecessor ended, ``--max-running-requests``
    honoured), over a launch of the design's ``requests`` and ``warmup`` (the closed loop's rounds:
    ``core.workload.total_requests``). A request metric is the mean over the measured requests, as a
    launch's value is; ``output_throughput`` and ``request_throughput`` are the launch's, over its
    measured window as rules version 4 counts it (``core.metrics.WINDOW_EDGE_S``). ``decode_tok_s`` is the
    client's statistic, (completion_tokens - 1) / (t_last - t_first), so it includes the end effect of
    a truncated last verify step. docs/model.md.
    """
    prof = load_profile(profile) if isinstance(profile, str) else profile
    args = model.resolve_args(server_flags)
    if output_tokens < 1 or prompt_tokens < 1 or concurrency < 1:
        raise ValueError("prompt_tokens, output_tokens and concurrency must be >= 1")
    spec = model.spec_config(prof, args)
    scale = args.sim_noise_scale
    nz = prof.noise
    batch = min(concurrency, args.max_running_requests or concurrency)
    step = model.decode_step(prof, args, batch)
    mean_accept = model.profile_accept_mean(prof, spec) if spec else 1.0
    rows = closed_loop_rows(prof, args, prompt_tokens, output_tokens, concurrency, requests, warmup)
    measured = [r for r in rows if r["phase"] == "measured"]

    def mean(key: str) -> float:
        values = [float(r[key]) for r in measured if r.get(key) is not None]
        return sum(values) / len(values) if values else float("nan")

    steps = sum(1 for _ in model._step_counts(mean_accept if spec else 1.0, output_tokens - 1))
    return {
        "profile": prof.name,
        "decode_tok_s": mean("decode_tok_s"),
        "steady_decode_tok_s": mean_accept / (step.total_us / 1e6),
        "ttft_s": mean("ttft_s"),
        "tpot_s": mean("tpot_s"),
        "e2e_s": mean("e2e_s"),
        "output_tok_s": mean("output_tok_s"),
        "output_throughput": metrics_mod.launch_value("output_throughput", rows, edge_s=metrics_mod.WINDOW_EDGE_S),
        "request_throughput": metrics_mod.launch_value("request_throughput", rows, edge_s=metrics_mod.WINDOW_EDGE_S),
        "step_s": step.total_us / 1e6,
        "decode_steps": steps,
        "accept_length": mean_accept if spec else None,
        "allreduce_impl": step.allreduce_impl,
        "launch_log_sd": nz.launch_log_sd * scale,
        "request_log_sd": nz.request_log_sd * scale,
        "step_log_sd": nz.step_log_sd * scale,
        "slow_launch_prob": min(1.0, nz.slow_launch_prob * scale),
        "slow_launch_factor": 1.0 + (nz.slow_launch_factor - 1.0) * scale,
        "accept_length_request_sd": nz.accept_length_request_sd * scale if spec else 0.0,
    }
