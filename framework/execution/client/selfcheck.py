"""The client's check on itself: could it follow the stream, and if not, by how much may its figures be off?

A client that falls behind does not fail: it stamps every token late, by more the further behind it
is, and its figures drift with no error anywhere (issue 23: at 256 streams a client with its core
100% busy and 23-35 tokens per socket read reported decode 408 tok/s against a true 500). Three
measurements, taken per launch, say when that happened:

- **CPU**: the share of the workload's wall time the event loop thread was running or runnable: its CPU
  time (``time.thread_time``) plus the time it waited for a core that other processes held (Linux
  schedstat's run-queue wait, ``run_queue_s``). A loop busy nearly all the time is saturated: every
  ready socket waits for the others, and the delay can grow over a stream, so no bound from the reads
  holds (``saturated``, at ``BUSY_SATURATED``).
- **events per socket read**: a read that returns several events of one stream stamps them all
  with one time; the oldest had waited about (events - 1) x the stream's interval between events. While
  the loop is idle it waits in the kernel and reads each write as it comes, so several events in a
  read are then the server's own batching, not the client's delay; they count as the client's from
  ``BUSY_READS`` of its CPU on.
- **event-loop lag**: how long a callback made ready waits before it runs (loops._LoopLag), which every
  read's stamp waits too.

Per request, the possible stamp delay of its first and last token-carrying reads is
``d = lag_p50 + (events - 1) x interval`` (interval: the request's first-to-last span over its events
minus one, itself inflated when the client is late, so the estimate errs large). A figure's possible
relative bias is then: TTFT ``d_first / ttft``; TPOT and decode ``max(d_first, d_last) / span`` (both
stamps are late, by 0 to d); e2e and the throughputs ``d_last / e2e``. The launch keeps the median over
its measured requests per metric (``bias``), like the sim's lag check (servers/sim/fidelity.py). Rows
whose figures come from the server's own clock (``clock: sim_model``) depend on the client's sends
only, not on its reads: they carry no read bias and cannot saturate it.

Pure functions (the measurements are taken in loops and request).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from framework.execution.client.stream import token_times

CLIENT_LATE_WARN_S = 0.001  # median open-loop send lateness above this: the client could not keep the schedule
LOOP_LAG_WARN_SHARE = 0.01  # median loop lag above this share of the median request's first-to-last-token span
BUSY_SATURATED = 0.9  # the loop thread's CPU share from which the client is saturated (no bound holds)
BUSY_READS = 0.5  # the CPU share from which several events in one read count as the client's delay
BIAS_WARN = 0.01  # a metric's possible relative bias above which the run warns
BIAS_METRICS = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s", "output_tok_s")


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"n": len(values), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(np.max(values))}


def request_bias(row: dict[str, Any], events: list[int], lag: float, reads_count: bool) -> dict[str, float] | None:
    """One request's possible relative bias per metric from its reads (module docstring); None without two reads."""
    t = token_times(row.get("chunk_times_s") or [], row.get("chunk_tokens") or [])
    ev = [e for e, n in zip(events, row.get("chunk_tokens") or [], strict=False) if n > 0]
    if len(t) < 2 or len(ev) != len(t) or not row.get("e2e_s"):
        return None
    span = t[-1] - t[0]
    total = sum(ev)
    interval = span / (total - 1) if total > 1 else 0.0
    d_first = lag + ((ev[0] - 1) * interval if reads_count else 0.0)
    d_last = lag + ((ev[-1] - 1) * interval if reads_count else 0.0)
    e2e = row["e2e_s"] / (row.get("time_scale") or 1.0)
    decode = max(d_first, d_last) / span if span > 0 else None
    out = {"ttft_s": d_first / t[0] if t[0] > 0 else None, "tpot_s": decode, "decode_tok_s": decode,
           "e2e_s": d_last / e2e if e2e > 0 else None, "output_tok_s": d_last / e2e if e2e > 0 else None}
    return {k: v for k, v in out.items() if v is not None}


def client_health(lateness: list[float], loop_lag: list[float], rows: list[dict[str, Any]], *,
                  cpu: dict[str, float] | None = None, reads: list[list[int]] | None = None) -> dict[str, Any]:
    """The client's own timing and whether it was the bottleneck, with the possible bias of each figure (pure).

    `rows`: the measured requests' rows; `reads`: each one's events per token-carrying read (aligned with
    `rows`; None when not measured); `cpu`: the loop thread's and the process's CPU seconds over the
    workload's wall seconds (``thread_s``, ``process_s``, ``wall_s``).
    """
    wall_rows = [(r, (reads[i] if reads is not None and i < len(reads) else None))
                 for i, r in enumerate(rows) if r.get("clock") != "sim_model"]
    gaps, spans = [], []
    for r, _ in wall_rows:
        t = token_times(r.get("chunk_times_s") or [], r.get("chunk_tokens") or [])
        gaps += [b - a for a, b in zip(t, t[1:], strict=False)]
        if len(t) >= 2:
            spans.append(t[-1] - t[0])
    median_gap = statistics.median(gaps) if gaps else None
    median_span = statistics.median(spans) if spans else None
    late, lag = _quantiles(lateness), _quantiles(loop_lag)
    busy = (cpu["thread_s"] + cpu.get("run_queue_s", 0.0)) / cpu["wall_s"] if cpu and cpu.get("wall_s") else None
    reads_count = busy is not None and busy >= BUSY_READS
    per_read = [e for r, ev in wall_rows if r.get("ok", True) and ev for e in ev]
    biases: dict[str, list[float]] = {m: [] for m in BIAS_METRICS}
    for r, ev in wall_rows:
        if ev is None or not r.get("ok", True):
            continue
        b = request_bias(r, ev, lag["p50"] or 0.0, reads_count)
        for k, v in (b or {}).items():
            biases[k].append(v)
    bias = {m: (statistics.median(v) if v else None) for m, v in biases.items()}
    saturated = bool(wall_rows) and busy is not None and busy >= BUSY_SATURATED
    reasons = []
    if late["p50"] is not None and late["p50"] > CLIENT_LATE_WARN_S:
        reasons.append(f"median send lateness {late['p50'] * 1e3:.2f} ms > {CLIENT_LATE_WARN_S * 1e3:g} ms")
    if lag["p50"] is not None and median_span and lag["p50"] > LOOP_LAG_WARN_SHARE * median_span:
        reasons.append(f"median event-loop lag {lag['p50'] * 1e3:.3f} ms > {LOOP_LAG_WARN_SHARE:.0%} of the median "
                       f"first-to-last-token span ({median_span * 1e3:.1f} ms)")
    if saturated:
        reasons.append(f"the client's event loop was running or waiting for a core {busy:.0%} of the workload's "
                       f"wall time "
                       f"(>= {BUSY_SATURATED:.0%}: saturated, its stamps may lag by more than its reads show)")
    worst = max(((m, v) for m, v in bias.items() if v is not None), key=lambda mv: mv[1], default=None)
    if worst is not None and worst[1] > BIAS_WARN:
        mean_events = sum(per_read) / len(per_read) if per_read else 0.0
        reasons.append(f"its reads carried {mean_events:.1f} events each on average: figures may be off by up to "
                       + ", ".join(f"{v:.1%} ({m})" for m, v in bias.items() if v is not None and v > BIAS_WARN))
    return {"send_lateness_wall_s": late, "loop_lag_wall_s": lag, "median_chunk_gap_wall_s": median_gap,
            "median_span_wall_s": median_span,
            "cpu": None if cpu is None else {**{k: round(v, 6) for k, v in cpu.items()},
                                             "busy": None if busy is None else round(busy, 4)},
            "events_per_read": None if not per_read else {
                "reads": len(per_read), "mean": sum(per_read) / len(per_read),
                "p50": float(np.percentile(per_read, 50)), "p90": float(np.percentile(per_read, 90)),
                "max": max(per_read), "multi_share": sum(e > 1 for e in per_read) / len(per_read)},
            "bias": bias, "saturated": saturated, "bottleneck": bool(reasons), "reasons": reasons}
