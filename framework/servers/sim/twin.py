"""A fitted twin (framework.core.twin.TwinFit) as a sim profile, its step equations, and its predictions.

The twin's model is the sim's engine (continuous batching, prefill first, ``--max-running-requests``)
with its step times replaced by a few fitted parameters (docs/model.md, "Twin"):

    decode/verify step over T tokens = (d0 + d1 (T - 1)) s_thr + a T [tp > 1] + o_spec [speculative]
    prefill of P tokens              = (p0 + p1 P + p_c (ceil(P / chunk) - 1)) s_thr_batch + a P [tp > 1]
    s_thr = (threads / reference_threads) ** -thread_exponent

A request is ready at once (the request overhead is inside p0), so TTFT = queueing + prefill. The
predictions replay one noise-free closed-loop launch (:mod:`framework.servers.sim.served`). Pure.
"""

from __future__ import annotations

import math
from typing import Any

from framework.core import metrics as metrics_mod
from framework.core.twin import TwinConfig, TwinFit
from framework.servers.sim import engines
from framework.servers.sim.profile import Profile

METRICS = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s", "output_tok_s")
SIM_OWN_FLAGS = {"--model-path", "--tp-size", "--host", "--port", "--random-seed"}


def profile_from_fit(fit: TwinFit) -> Profile:
    """The sim profile that serves a twin: the twin's block plus neutral values for SGLang's tables (unused)."""
    acc = fit.parameters.get("accept_length")
    accept = acc.estimate if acc is not None and acc.estimate is not None and acc.estimate > 1.0 else 2.0
    tp = int(fit.fixed.get("tp_size", 1))
    tpot = fit.noise.get("tpot_s")
    return Profile.model_validate({
        "name": fit.name, "description": f"twin of {fit.engine}, fitted by `python -m framework fit`",
        "version": f"twin-{fit.engine}", "hardware": {"num_gpus": tp}, "stack": {"engine": fit.engine},
        "model": {"num_layers": 1, "hidden_size": 1, "dtype_bytes": 1, "allreduces_per_layer": 0},
        "compute_us": {"decode": [(1, 0.0)], "prefill": [(1, 0.0)]}, "allreduce_us": {"nccl": [(1, 0.0)]},
        "features": {"custom_allreduce": False, "flashinfer_fusion": "ok", "torch_symm_mem": False},
        "fused_max_bytes": 0, "custom_max_bytes": 0, "symm_mem_max_bytes": 0, "fusion_saved_us_per_layer": 0.0,
        "forward_overhead_us": 0.0, "launch_overhead_us_per_layer": 0.0, "request_overhead_us": 0.0,
        "spec": {"draft_step_us": 0.0, "overhead_us": 0.0, "accept_length_mean": accept},
        "noise": {"launch_log_sd": (tpot.launch_log_sd or 0.0) if tpot else 0.0,
                  "request_log_sd": (tpot.request_log_sd or 0.0) if tpot else 0.0,
                  "step_log_sd": 0.0, "slow_launch_prob": 0.0, "slow_launch_factor": 1.0,
                  "accept_length_request_sd": 0.0},
        "startup_s": 1.0, "crash_after_s": 0.5, "twin": fit,
    })


def _thread_scale(fit: TwinFit, threads: int | None) -> float:
    ref = fit.reference_threads
    if threads is None or ref is None or threads == ref:
        return 1.0
    return (threads / ref) ** -fit.value("thread_exponent")


def decode_us(fit: TwinFit, tokens: int, *, threads: int | None, tp: int, speculative: bool) -> float:
    d = (fit.value("decode_step_us") + fit.value("decode_us_per_token") * (tokens - 1)) * _thread_scale(fit, threads)
    if tp > 1:
        d += fit.value("allreduce_us_per_token") * tokens
    return d + (fit.value("spec_overhead_us") if speculative else 0.0)


def prefill_us(fit: TwinFit, tokens: int, *, threads: int | None, chunk: int | None, tp: int) -> float:
    chunks = math.ceil(tokens / chunk) if chunk else 1
    p = (fit.value("prefill_base_us") + fit.value("prefill_us_per_token") * tokens
         + fit.value("prefill_chunk_us") * (chunks - 1)) * _thread_scale(fit, threads)
    return p + (fit.value("allreduce_us_per_token") * tokens if tp > 1 else 0.0)


def server_flags(config: TwinConfig) -> list[str]:
    """The argv the sim parses for a configuration (its own flags plus the engine's)."""
    return ["--model-path", "twin", "--tp-size", str(config.tp_size), *config.flags]


def predict(fit: TwinFit, config: TwinConfig) -> dict[str, float]:
    """The twin's noise-free launch means (every request metric, plus output_throughput) at a configuration."""
    from framework.servers.sim.args import parse_twin_args
    from framework.servers.sim.served import closed_loop_rows

    profile = profile_from_fit(fit)
    args = parse_twin_args(profile, server_flags(config))
    rows = closed_loop_rows(profile, args, config.prompt_tokens, config.output_tokens, config.concurrency,
                            config.requests, config.warmup)
    measured = [r for r in rows if r["phase"] == "measured"]
    out: dict[str, float] = {}
    for key in METRICS:
        values = [float(r[key]) for r in measured if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else float("nan")
    out["output_throughput"] = float(metrics_mod.launch_value("output_throughput", rows) or float("nan"))
    return out


def depends_on(fit: TwinFit, config: TwinConfig, metric: str, rel: float = 1e-3) -> list[str]:
    """The parameters this configuration's `metric` moves with (a finite difference of the prediction)."""
    base = predict(fit, config)[metric]
    out = []
    for name in fit.parameters:
        v = fit.value(name)
        step = abs(v) * rel if v else rel * (1.0 if name in ("thread_exponent", "accept_length") else 10.0)
        moved = predict(fit.with_values({name: v + step}), config)[metric]
        if math.isfinite(base) and math.isfinite(moved) and abs(moved - base) > 1e-12 * max(1.0, abs(base)):
            out.append(name)
    return out


def engine_summary(fit: TwinFit, config: TwinConfig) -> dict[str, Any]:
    """What the twin read from a configuration's flags (for records and `fit`'s output)."""
    if not engines.engine_takes_own_flags(fit.engine):
        return {}
    _, theirs = engines.split(server_flags(config), fit.engine, SIM_OWN_FLAGS)
    s = engines.settings(fit.engine, theirs)
    return {"threads": s.threads, "prefill_chunk": s.prefill_chunk, "slots": s.slots, "context": s.context,
            "not_modelled": s.not_modelled}
