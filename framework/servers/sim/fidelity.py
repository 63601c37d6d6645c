"""How far the simulator's timing can be trusted in a run: pure functions over its trials rows.

The sim reports its lateness and the batch its model ran; these turn that into each metric's largest
possible error, the model-clock bias per condition, open-loop arrival lateness, and whether a bias could
move a decision (docs/model.md, "Timing"). The runner warns and marks verdicts with them.
"""

from __future__ import annotations

import statistics
from typing import Any

from framework.analysis.bias import could_move
from framework.core import design as design_mod
from framework.core.metrics import base_metric
from framework.core.spec import Experiment, Hypothesis
from framework.core.trials import Trials
from framework.execution import client
from framework.servers.sim import coverage
from framework.servers.sim import model as sim_model
from framework.servers.sim.args import parse_server_args
from framework.servers.sim.profile import load_profile

SIM_LAG_WARN = 0.01  # the relative bias above which a run warns


def sim_open_loop_lateness(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    """How late open-loop requests reached the sim's model clock against their schedule (model seconds,
    per launch relative to its earliest request, so the clocks' origins cancel), and relative to the
    median request's e2e. None without open-loop rows on the model clock."""
    by_launch: dict[str, list[tuple[float, float]]] = {}
    for r in Trials.of(rows).of_kind("request"):
        if (r.get("ok") and r.get("clock") == "sim_model"
                and r.get("scheduled_s") is not None and r.get("model_start_s") is not None and r.get("e2e_s")):
            by_launch.setdefault(r["launch_id"], []).append(
                (float(r["model_start_s"]) - float(r["scheduled_s"]), float(r["e2e_s"])))
    lates: list[float] = []
    e2es: list[float] = []
    for items in by_launch.values():
        base = min(d for d, _ in items)
        lates += [d - base for d, _ in items]
        e2es += [e for _, e in items]
    if not lates:
        return None
    med = statistics.median(lates)
    return {"median_s": med, "max_s": max(lates), "median_relative": med / statistics.median(e2es)}


def open_loop_mark(late: dict[str, float] | None) -> str | None:
    """The mark a verdict carries when open-loop arrivals reached the sim's model clock late: the arrival
    process the model served was then not the workload's (queueing, TTFT and throughput follow the arrivals),
    and no correction is known, so the verdict says so instead of claiming the workload's figures."""
    if not late or late["median_relative"] <= SIM_LAG_WARN:
        return None
    return (f"UNRELIABLE: open-loop requests reached the sim late against their schedule (median "
            f"{late['median_s'] * 1e3:.1f} ms of model time, {late['median_relative']:.1%} of a median request): "
            f"the arrivals it served were not the workload's")


def decision_could_move(h: Hypothesis, prediction: dict[str, Any], bias: float) -> bool:
    """Would the interval, stretched by the bias of every condition in the ratio, reach a decision threshold
    it does not reach now? (framework.analysis.bias.could_move, shared with the client's self-check)."""
    return could_move(h, prediction, bias)


def sim_clock_bias(h: Hypothesis, exp: Experiment, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per condition, how far the sim's clock could be from the model's, measured: the model's schedule
    is exact per request (its own timestamps), but between a closed-loop stream's requests the client's
    and the HTTP layer's wall time, multiplied by the speed-up, leaves the model's batch emptier than the
    workload's concurrency. The bias is the model's own step-time change from the nominal batch
    (concurrency, capped by max running requests) to the batch the engine reports it ran
    (``sim_mean_batch``, median over measured requests). docs/model.md, "Timing"."""
    out: dict[str, float] = {}
    conds = design_mod.conditions(h)
    sims = coverage.conditions(h, exp)
    requests = Trials.of(rows).of_kind("request")
    for c, sc in zip(conds, sims, strict=False):
        workload = design_mod.workload_for(h, exp, c)
        batches = [float(r["sim_mean_batch"]) for r in requests if r.get("condition") == c.index
                   and not r.get("warmup") and r.get("ok") and r.get("sim_mean_batch")]
        if not batches or getattr(workload, "concurrency", 1) <= 1:
            continue
        try:
            args = parse_server_args(sc.argv + ["--sim-profile", sc.profile], require_model_path=False,
                                     raise_errors=True)
            prof = load_profile(sc.profile)
        except Exception:
            continue
        out[c.label()] = sim_model.batch_bias(prof, args, workload.concurrency, statistics.median(batches))
    return out


def sim_relative_lag(rows: list[dict[str, Any]]) -> float | None:
    """The worst lateness of any of the sim's chunk hand-offs relative to the request's wall duration.

    Informational: the engine keeps absolute deadlines, so a late chunk in the middle of a stream
    delays only itself; what can move a metric is in `sim_metric_lags`.
    """
    worst = None
    for r in Trials.of(rows).of_kind("request"):
        lag, e2e, scale = r.get("sim_max_lag_s"), r.get("e2e_s"), r.get("time_scale") or 1.0
        if lag is not None and e2e:
            rel = lag / (e2e / scale)
            worst = rel if worst is None else max(worst, rel)
    return worst


def sim_metric_lags(rows: list[dict[str, Any]], metric: str) -> list[float]:
    """Per measured request, the largest relative error the sim's lateness can have put into `metric`.

    The metrics depend on the receipt of the first and the last token only: ttft_s on the first,
    e2e_s and output_tok_s on the last, decode_tok_s and tpot_s on the span between them (off by at
    most the larger of the two lags, both >= 0); accept_length on neither (no values). Rows from
    before the first/last lags were reported fall back to the worst lag of any chunk. A lag in one
    request is measurement noise the analysis already sees; the run warns on the median, which
    rises when the machine cannot sustain the speed-up and the lateness turns into a bias.
    """
    metric = base_metric(metric)
    out: list[float] = []
    for r in Trials.of(rows).of_kind("request"):
        if r.get("warmup") or not r.get("ok", True):
            continue
        if r.get("clock") == "sim_model":  # figures from the sim's own timestamps: hand-off lateness is not in them
            out.append(0.0)
            continue
        any_lag = r.get("sim_max_lag_s")
        first = r.get("sim_first_lag_s", any_lag)
        last = r.get("sim_last_lag_s", any_lag)
        times = client.token_times(r.get("chunk_times_s") or [], r.get("chunk_tokens") or [])
        scale = r.get("time_scale") or 1.0
        lag: float | None
        span: float | None
        if metric in ("decode_tok_s", "tpot_s"):
            lag = None if first is None or last is None else max(first, last)
            span = times[-1] - times[0] if len(times) >= 2 else None
        elif metric == "ttft_s":
            lag, span = first, (times[0] if times else None)
        elif metric in ("e2e_s", "output_tok_s"):
            lag, span = last, (r["e2e_s"] / scale if r.get("e2e_s") else None)
        else:
            return []
        if lag is not None and span:
            out.append(max(lag, 0.0) / span)
    return out
