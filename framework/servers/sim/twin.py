"""A fitted twin's predictions: one noise-free closed-loop launch replayed on its profile.

Its profile is `framework.servers.sim.profile.profile_from_fit`, its step equations
`framework.servers.sim.twin_steps`.

The twin's model is the sim's engine (continuous batching, prefill first, ``--max-running-requests``)
with its step times replaced by a few fitted parameters (docs/model.md, "Twin"). A request is ready
at once (the request overhead is inside p0), so TTFT = queueing + prefill. The predictions
replay one noise-free closed-loop launch (:mod:`framework.servers.sim.served`). Pure.
"""

from __future__ import annotations

from typing import Any

from framework.core import metrics as metrics_mod
from framework.core.twin import TwinConfig, TwinFit
from framework.servers.sim import engines
from framework.servers.sim.args import parse_twin_args
from framework.servers.sim.profile import profile_from_fit
from framework.servers.sim.served import closed_loop_rows

METRICS = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s", "output_tok_s")
SIM_OWN_FLAGS = {"--model-path", "--tp-size", "--host", "--port", "--random-seed"}


def server_flags(config: TwinConfig) -> list[str]:
    """The argv the sim parses for a configuration (its own flags plus the engine's)."""
    return ["--model-path", "twin", "--tp-size", str(config.tp_size), *config.flags]


def predict(fit: TwinFit, config: TwinConfig) -> dict[str, float]:
    """The twin's noise-free launch means (every request metric, plus output_throughput) at a configuration."""
    profile = profile_from_fit(fit)
    args = parse_twin_args(profile, server_flags(config))
    rows = closed_loop_rows(profile, args, config.prompt_tokens, config.output_tokens, config.concurrency,
                            config.requests, config.warmup)
    measured = [r for r in rows if r["phase"] == "measured"]
    out: dict[str, float] = {}
    for key in METRICS:
        values = [float(r[key]) for r in measured if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else float("nan")
    # the window as rules version 4 counts it
    throughput = metrics_mod.launch_value("output_throughput", rows, edge_s=metrics_mod.WINDOW_EDGE_S)
    out["output_throughput"] = float(throughput or float("nan"))
    return out


def engine_summary(fit: TwinFit, config: TwinConfig) -> dict[str, Any]:
    """What the twin read from a configuration's flags (for records and `fit`'s output)."""
    if not engines.engine_takes_own_flags(fit.engine):
        return {}
    _, theirs = engines.split(server_flags(config), fit.engine,
                              SIM_OWN_FLAGS | engines.SIM_SPEC_FLAGS.get(fit.engine, set()))
    s = engines.settings(fit.engine, theirs)
    return {"threads": s.threads, "prefill_chunk": s.prefill_chunk, "slots": s.slots, "context": s.context,
            "not_modelled": s.not_modelled}
