"""What the sim serves a closed loop, noise off: the engine's schedule replayed in model time, without a clock.

The engine (:mod:`framework.servers.sim.engine`) admits a closed loop's requests on its model clock
(:mod:`framework.servers.sim.arrivals`): the first burst at once, each successor the instant its
predecessor ended. With the noise model off that schedule depends on nothing but the profile, the
flags and the workload, so this module runs it step for step as the engine does (prefill every
ready request together, else one decode or verify step over the running batch; at most
``--max-running-requests`` admitted; requests ready together in arrival, then plan order) and
returns the rows the client would record. :func:`framework.servers.sim.expected.expected_metrics`
reads its figures from them, so ``plan`` plans for what a launch measures (tests/servers/sim/test_served.py
compares the two). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from framework.core.workload import Workload, total_requests
from framework.servers.sim import model
from framework.servers.sim.args import SimServerArgs
from framework.servers.sim.profile import Profile


@dataclass
class _Req:
    index: int
    phase: str
    arrival: float
    ready: float
    accept_mean: float | None
    output: list[int] = field(default_factory=list)  # tokens per chunk
    times: list[float] = field(default_factory=list)  # model s from arrival, per chunk
    step_index: int = 0
    done: int = 0


def closed_loop_rows(profile: Profile, args: SimServerArgs, prompt_tokens: int, output_tokens: int,
                     concurrency: int, requests_n: int, warmup: int) -> list[dict[str, Any]]:
    """The trial rows (the fields the metrics read) of one noise-free launch of a closed loop."""
    import numpy as np

    w = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens, concurrency=concurrency)
    n_warm, n_meas = total_requests(w, requests_n, warmup)
    n_cool = concurrency - 1 if concurrency > 1 else 0
    phases = ["warmup"] * n_warm + ["measured"] * n_meas + ["cooldown"] * n_cool
    spec = model.spec_config(profile, args)
    draw = model.draw_request(profile, args, 0.0, np.random.default_rng(0))
    overhead = profile.request_overhead_us / 1e6
    cap = args.max_running_requests
    taken = 0

    def arrive(t: float) -> _Req:
        nonlocal taken
        r = _Req(taken, phases[taken], t, t + overhead, draw.accept_mean)
        taken += 1
        return r

    now = 0.0
    streams = min(concurrency, len(phases))
    pending = [arrive(now) for _ in range(streams)]
    running: list[_Req] = []
    ended: list[_Req] = []
    measured_left = n_meas
    while (pending or running) and measured_left > 0:
        pending.sort(key=lambda r: (r.arrival, r.index))
        ready = [r for r in pending if r.ready <= now]
        if not ready and not running:
            now = max(now, min(r.ready for r in pending))
            continue
        if cap is not None:
            ready = ready[:max(0, cap - len(running))]
        if ready:
            batch, prefill = ready, True
            pending = [r for r in pending if r not in ready]
            cost = model.prefill_step(profile, args, sum(prompt_tokens for _ in ready))
        else:
            batch, prefill = list(running), False
            cost = model.decode_step(profile, args, len(batch))
        end = now + cost.total_us / 1e6 * 1.0 * 1.0 * 1.0  # the engine's factors, all 1 with the noise off
        finished = []
        for r in batch:
            remaining = output_tokens - r.done
            if prefill:
                n = min(1, remaining)
            else:
                n = model.tokens_for_step(spec, model.RequestDraw(1.0, r.accept_mean, None), 0.0, r.step_index,
                                          remaining, None)  # type: ignore[arg-type]
                r.step_index += 1
            r.done += n
            r.output.append(n)
            r.times.append(end - r.arrival)
            if r.done >= output_tokens:
                finished.append(r)
        now = end
        if prefill:
            running.extend(r for r in batch if r not in finished)
        running = [r for r in running if r not in finished]
        for r in finished:
            ended.append(r)
            if r.phase == "measured":
                measured_left -= 1
            if r.index < len(phases) - streams:  # it announced a successor (loops._closed_loop): sent now
                pending.append(arrive(now))
    return [_row(r) for r in sorted(ended, key=lambda r: r.index)]


def _row(r: _Req) -> dict[str, Any]:
    """The fields of a trial row the metrics read, as the client records them from the sim's stamps."""
    times = [t for t, n in zip(r.times, r.output, strict=False) if n > 0]
    n = sum(r.output)
    row: dict[str, Any] = {
        "kind": "request", "index": r.index, "phase": r.phase, "warmup": r.phase != "measured", "ok": True,
        "clock": "sim_model", "model_start_s": r.arrival, "start_s": r.arrival, "completion_tokens": n,
        "chunk_model_times_s": list(r.times), "chunk_model_tokens": list(r.output),
        "ttft_s": times[0], "e2e_s": r.times[-1], "output_tok_s": n / r.times[-1],
        "tpot_s": None, "decode_tok_s": None,
    }
    if len(times) >= 2 and n >= 2 and times[-1] > times[0]:
        row["tpot_s"] = (times[-1] - times[0]) / (n - 1)
        row["decode_tok_s"] = (n - 1) / (times[-1] - times[0])
    return row
