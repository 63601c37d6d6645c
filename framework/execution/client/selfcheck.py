"""The client's check on itself: could it follow the stream, and if not, by how much may its figures be off?

A client that falls behind does not fail: it stamps every token late, by more the further behind it
is, and its figures drift with no error anywhere (issue 23: at 256 streams a client with its core
100% busy and 23-35 tokens per socket read reported decode 408 tok/s against a true 500). A read's
stamp is late by the time its bytes waited in the socket, and three measurements bound that wait:

- **events per socket read**: a read that returns several events of one stream stamps them all with
  one time; if the server wrote them apart, the oldest had waited about (events - 1) x the stream's
  interval between events. A server that writes several events at once (a late tick, a merged
  decode step) gives the same reads with a prompt client, so this alone is an upper bound.
- **event-loop lag and stalls**: how long a callback made ready waits before it runs, and how late
  the loop's 10 ms timer fires (loops._LoopLag; wall time, so both count the time the thread waited
  for a core that other processes held). A socket's bytes cannot wait longer than the loop was away,
  so the larger of the two maxima (``cap``) caps the wait the reads suggest: many events per read
  with a prompt loop are the server's batching.
- **the end's wait**: a response's end (its e2e stamp, which the field's TPOT, (e2e - ttft) / (n - 1),
  ends on) is stamped after its last token's read; the time between the two is the client's own.

Criterion 4 (``CRITERION``; rows carry it as ``criterion``, a row without one used criterion 1) measures
each read's wait instead of inferring it: the loop's polls are timed (client.polls), and bytes handed over
in a turn whose poll blocked woke it (they waited only their place in the turn), otherwise they arrived
during the busy turn before (taken at its middle). The first token's read waited ``w_first``, the last's
``w_last``, the end ``d_end = w_last + (e2e - last read)``; TPOT and decode ``(d_end - w_first) / span``,
TTFT ``w_first / ttft``, e2e and the throughputs ``d_end / e2e``, and a whole stream in one read is piled
when the loop's bound (its largest lag or timer stall) is at least (events - 1) x the launch's median interval,
as in criterion 3 (the read's measured wait is a busy turn's middle; a pile's oldest bytes waited longer).
Criterion 3 read the events per read as the wait, which a per-read loop delay common to both stamps
defeats: on a quiet 2-core host a request whose first token waited 5.8 ms and last 4.5 ms (the truth log
against the stamps) read 2 events in each, and criterion 3 charged the first (k - 1) x interval and the
last half an interval (docs/results/selfcheck.md). Where no read's wait was measured (a loop whose selector
cannot be timed) the row says criterion 3, whose rule follows.

Criterion 3. A read
that carried k events of a stream was late by about (k - 1) x interval for its oldest event (interval:
the request's first-to-last span over its events minus one) and by an unseen part of one interval, taken
at its middle when k > 1, for its newest. The first token is the oldest event of its read, so the first
read is late by ``d_first = min((k_first - 1) x interval + interval / 2 [k_first > 1], cap)``; the last
token is the newest of its read, so the last read is late by ``d_last = min(interval / 2 [k_last > 1],
cap)``, however many events it carried, and the end by ``d_end = d_last + (e2e - last read)``.
Criterion 2 charged the last read (k_last - 1) x interval too, as if the last token were the oldest of
its read: on a quiet host a run with a TPOT error of -0.48% had a bias of +1.18% (three events piled
in its last read; docs/results/selfcheck.md), the wrong size and the wrong sign, since a late first read
makes the field's TPOT read short. TPOT is a difference of two stamps, so a wait common to both
cancels: its possible relative bias is ``(d_end - d_first) / span``, signed, and the launch keeps the
absolute value of its median over the measured requests (decode alike); TTFT ``d_first / ttft``; e2e
and the throughputs ``d_end / e2e`` (medians, like the sim's lag check, servers/sim/fidelity.py). A
request whose whole stream came in one read has no decode the reads can time: it counts as a TPOT and
decode bias of 100% when ``cap`` is at least (its events - 1) x the launch's median interval between
events (the loop was away long enough for them to pile up), else 0 (the server sent them together). A
bias over ``BIAS_WARN`` makes the client the bottleneck with its figure, and analysis/bias.py marks
the verdicts that figure could move. The loop's CPU share (``cpu.busy``: running plus waiting for a
core, Linux schedstat's run-queue wait) is reported but decides nothing: criterion 1 called a loop
busy >= 90% "saturated" and marked every timed verdict, which fired on accurate runs (issue 32: 6 of
15 runs under 0.5% TPOT error on a quiet box, 4 workers x 256 streams at +0.03%); criterion 2 never
sets ``saturated``, and its bias is an estimate, not criterion 1's bound ``max(d_first, d_last) /
span``, which a steady lag common to both stamps made large while the TPOT error was small. Send
lateness (open loop) and a median loop lag over 1% of the median span are still reasons (warnings):
the first changes the offered load, not the figures' clock. benchmarks/selfcheck_calibration.py
measures the criterion against the known-schedule server's truth (docs/results/selfcheck.md).

Rows whose figures come from the server's own clock (``clock: sim_model``) depend on the client's
sends only, not on its reads: they carry no read bias.

Pure functions (the measurements are taken in loops and request).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from framework.execution.client.stream import token_times

CLIENT_LATE_WARN_S = 0.001  # median open-loop send lateness above this: the client could not keep the schedule
LOOP_LAG_WARN_SHARE = 0.01  # median loop lag above this share of the median request's first-to-last-token span
CRITERION = 4  # the self-check's criterion version (module docstring); 3 where no read's wait was measured
BIAS_WARN = 0.01  # a metric's possible relative bias above which the run warns
BIAS_METRICS = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s", "output_tok_s")


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"n": len(values), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(np.max(values))}


def request_bias(row: dict[str, Any], events: list[int], cap: float,
                 interval_ref: float = 0.0, waits: list[float | None] | None = None) -> dict[str, float] | None:
    """One request's possible relative bias per metric from its reads, each read's wait capped by `cap`, the
    loop's largest lag or timer stall (module docstring); None without two reads, except a whole stream in
    one read (below). TPOT and decode are signed (the end's wait less the first token's: a wait common to
    both cancels in their difference).

    A stream of several events in one read has no decode the reads can time: if the loop was away long
    enough for them to pile up (`cap` >= (events - 1) x `interval_ref`, the launch's median interval
    between events), its TPOT and decode may be off by 100%; otherwise the server sent them together.

    `waits` (criterion 4): each chunk's bytes' measured wait for the loop (client.polls), aligned with the
    row's chunks; where the first and last token-carrying reads have one, they are the two stamps' lateness
    and replace criterion 3's reading of the events per read. The one-read rule keeps `cap`: a read's measured
    wait is taken at the middle of the loop's busy turn, and the oldest bytes of a pile waited longer, so only
    the bound says whether the loop may have been away long enough."""
    tokens = row.get("chunk_tokens") or []
    t = token_times(row.get("chunk_times_s") or [], tokens)
    ev = [e for e, n in zip(events, tokens, strict=False) if n > 0]
    w = [x for x, n in zip(waits, tokens, strict=False) if n > 0] if waits and len(waits) == len(tokens) else []
    if len(t) == 1 and len(ev) == 1 and ev[0] > 1 and row.get("e2e_s"):
        piled = cap >= (ev[0] - 1) * interval_ref
        return {"tpot_s": 1.0 if piled else 0.0, "decode_tok_s": 1.0 if piled else 0.0}
    if len(t) < 2 or len(ev) != len(t) or not row.get("e2e_s"):
        return None
    span = t[-1] - t[0]
    e2e = row["e2e_s"] / (row.get("time_scale") or 1.0)
    if len(w) == len(t) and w[0] is not None and w[-1] is not None:  # criterion 4: the waits as measured
        end = w[-1] + max(0.0, e2e - t[-1])
        decode = (end - w[0]) / span if span > 0 else None
        out = {"ttft_s": w[0] / t[0] if t[0] > 0 else None, "tpot_s": decode, "decode_tok_s": decode,
               "e2e_s": end / e2e if e2e > 0 else None, "output_tok_s": end / e2e if e2e > 0 else None}
        return {k: v for k, v in out.items() if v is not None}
    total = sum(ev)
    interval = span / (total - 1) if total > 1 else 0.0
    # criterion 3: a read of k events waited for the oldest (k - 1) intervals plus the newest's own wait, which
    # the read cannot see beyond [0, interval) and is taken at its middle when the read piled (k > 1). The first
    # token is the oldest event of its read; the last token is the newest of its read, so only that half interval
    # is the last token's wait, however many events its read carried.
    own = [interval / 2 if k > 1 else 0.0 for k in (ev[0], ev[-1])]
    d_first = min((ev[0] - 1) * interval + own[0], cap)
    d_last = min(own[1], cap)
    end = d_last + max(0.0, e2e - t[-1])  # the response's end is stamped after its last token's read
    decode = (end - d_first) / span if span > 0 else None
    out = {"ttft_s": d_first / t[0] if t[0] > 0 else None, "tpot_s": decode, "decode_tok_s": decode,
           "e2e_s": end / e2e if e2e > 0 else None, "output_tok_s": end / e2e if e2e > 0 else None}
    return {k: v for k, v in out.items() if v is not None}


def client_health(lateness: list[float], loop_lag: list[float], rows: list[dict[str, Any]], *,
                  cpu: dict[str, float] | None = None, reads: list[list[int]] | None = None,
                  stalls: list[float] | None = None,
                  waits: list[list[float | None]] | None = None) -> dict[str, Any]:
    """The client's own timing and whether it was the bottleneck, with the possible bias of each figure (pure).

    `rows`: the measured requests' rows; `reads`: each one's events per token-carrying read (aligned with
    `rows`; None when not measured); `cpu`: the loop thread's and the process's CPU seconds over the
    workload's wall seconds (``thread_s``, ``process_s``, ``wall_s``); `stalls`: how late the loop's lag
    timer fired (loops._LoopLag); `waits`: each measured request's per-chunk waits for the loop (client.polls,
    aligned with `rows`; criterion 4 where given).
    """
    wall_rows = [(r, (reads[i] if reads is not None and i < len(reads) else None))
                 for i, r in enumerate(rows) if r.get("clock") != "sim_model"]
    wall_waits = [(waits[i] if waits is not None and i < len(waits) else None)
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
    per_read = [e for r, ev in wall_rows if r.get("ok", True) and ev for e in ev]
    stall = _quantiles(stalls or [])
    cap = read_cap(loop_lag, stalls or [])
    biases, measured_waits = _request_biases(wall_rows, wall_waits, cap)
    bias = launch_bias(biases)
    reasons = []
    if late["p50"] is not None and late["p50"] > CLIENT_LATE_WARN_S:
        reasons.append(f"median send lateness {late['p50'] * 1e3:.2f} ms > {CLIENT_LATE_WARN_S * 1e3:g} ms")
    if lag["p50"] is not None and median_span and lag["p50"] > LOOP_LAG_WARN_SHARE * median_span:
        reasons.append(f"median event-loop lag {lag['p50'] * 1e3:.3f} ms > {LOOP_LAG_WARN_SHARE:.0%} of the median "
                       f"first-to-last-token span ({median_span * 1e3:.1f} ms)")
    mean_events = sum(per_read) / len(per_read) if per_read else 0.0
    why = bias_reason(bias, mean_events, cap)
    if why is not None:
        reasons.append(why)
    return {"send_lateness_wall_s": late, "loop_lag_wall_s": lag, "loop_stall_wall_s": stall,
            "median_chunk_gap_wall_s": median_gap,
            "median_span_wall_s": median_span,
            "cpu": None if cpu is None else {**{k: round(v, 6) for k, v in cpu.items()},
                                             "busy": None if busy is None else round(busy, 4)},
            "events_per_read": None if not per_read else {
                "reads": len(per_read), "mean": sum(per_read) / len(per_read),
                "p50": float(np.percentile(per_read, 50)), "p90": float(np.percentile(per_read, 90)),
                "max": max(per_read), "multi_share": sum(e > 1 for e in per_read) / len(per_read)},
            "bias": bias, "saturated": False, "bottleneck": bool(reasons), "reasons": reasons,
            "criterion": CRITERION if measured_waits else CRITERION - 1}


def read_cap(loop_lag: list[float], stalls: list[float]) -> float:
    """The longest a socket's bytes can have waited for the loop: its largest lag or timer stall."""
    return max(max(loop_lag, default=0.0), max(stalls, default=0.0))


def _request_biases(wall_rows: list[tuple[dict[str, Any], list[int] | None]],
                    wall_waits: list[list[float | None] | None], cap: float) -> tuple[dict[str, list[float]], bool]:
    """Each measured request's signed possible bias per metric (request_bias), and whether any had every read's
    wait measured (criterion 4)."""
    intervals = []  # per request with two reads or more: its first-to-last span over its events minus one
    for r, ev in wall_rows:
        t = token_times(r.get("chunk_times_s") or [], r.get("chunk_tokens") or [])
        carrying = sum(e for e, n in zip(ev or [], r.get("chunk_tokens") or [], strict=False) if n > 0)
        if len(t) >= 2 and carrying > 1:
            intervals.append((t[-1] - t[0]) / (carrying - 1))
    interval_ref = statistics.median(intervals) if intervals else 0.0
    biases: dict[str, list[float]] = {m: [] for m in BIAS_METRICS}
    measured_waits = False
    for (r, ev), w in zip(wall_rows, wall_waits, strict=True):
        if ev is None or not r.get("ok", True):
            continue
        measured_waits = measured_waits or bool(w) and all(x is not None for x in w)
        for k, v in (request_bias(r, ev, cap, interval_ref, w) or {}).items():
            biases[k].append(v)
    return biases, measured_waits


def launch_bias(biases: dict[str, list[float]]) -> dict[str, float | None]:
    """A launch's possible relative bias per metric: the absolute value of the median over its requests' signed
    biases (its figures are medians over those requests)."""
    return {m: (abs(statistics.median(biases.get(m) or [])) if biases.get(m) else None) for m in BIAS_METRICS}


def bias_reason(bias: dict[str, float | None], mean_events: float, cap: float) -> str | None:
    """The bottleneck reason when some metric's possible bias is over BIAS_WARN, else None."""
    over = [(m, v) for m, v in bias.items() if v is not None and v > BIAS_WARN]
    if not over:
        return None
    return (f"its reads carried {mean_events:.1f} events each on average and its event loop lagged by up to "
            f"{cap * 1e3:.1f} ms: figures may be off by up to " + ", ".join(f"{v:.1%} ({m})" for m, v in over))
