"""Metric names and their per-launch values: what a prediction's `metric:` may name. Pure.

Two families (definitions beside SGLang's bench_serving in docs/workloads.md):

- per-request metrics (`ttft_s`, `tpot_s`, `e2e_s`, `decode_tok_s`, `output_tok_s`, `accept_length`,
  `completion_tokens`): a launch's value is the mean over its measured requests, or for the rates
  under rules version 2 the ratio of their totals (`ratio_parts`);
- launch metrics, computed from all of a launch's rows at once:
  `<request metric>.<stat>` with stat in mean, p50, p90, p99 (e.g. `ttft_s.p99`); `itl_s.<stat>`
  over every gap between token-carrying chunks of the measured requests; `output_throughput`
  (tokens/s) and `request_throughput` (requests/s) over the measured window; `goodput` (requests/s
  meeting every SLO) and `slo_attainment` (their share of the measured requests).

The measured window runs from the first measured request's send to the last one's end. Output
throughput counts the tokens that arrived inside the window from every request in flight
(warm-up and cool-down requests keep the load steady and their tokens are the server's output
too); request throughput counts the requests that ended inside it. All times are model seconds.
With ``edge_s`` (rules version 4, ``RuleSet.window_edge``: ``WINDOW_EDGE_S``) the window is
(start, end], each edge widened by ``edge_s`` against the client's 0.1 us rounding: what ends or
arrives at the window's start (a closed loop's warm-up requests, whose successors start the window)
is outside, what ends at its end is inside. Without it (versions 1-3): tokens in [start, end],
requests ending in (start, end + 1 ns], so a warm-up request that ended at the start was counted
whenever rounding put its end a hair past it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

REQUEST_METRICS: dict[str, str] = {
    "decode_tok_s": "decode tokens/s per request: tokens after the first chunk / (t_last - t_first)",
    "output_tok_s": "completion tokens per second of end-to-end latency",
    "ttft_s": "time to first token, seconds",
    "tpot_s": "time per output token after the first, seconds",
    "e2e_s": "end-to-end request latency, seconds",
    "accept_length": "speculative accept length (tokens per verify step) from meta_info",
    "completion_tokens": "output tokens of a request",
}
STATS = ("mean", "p50", "p90", "p99")
# the window's edges under rules version 4: above the client's timestamp rounding (0.1 us, summed over a start
# and a duration), far below any step of a server (tens of microseconds and more)
WINDOW_EDGE_S = 1e-6
LAUNCH_METRICS: dict[str, str] = {
    "output_throughput": "output tokens/s over the measured window, every request in flight counted",
    "request_throughput": "requests/s ending inside the measured window",
    "goodput": "measured requests meeting every SLO per second of the measured window (needs slo)",
    "slo_attainment": "share of measured requests meeting every SLO (needs slo)",
}
SLO_KEYS = ("ttft_s", "tpot_s", "e2e_s", "itl_s")
# rates: larger is better; everything else here is a time (smaller is better) or a count


def all_metric_names() -> list[str]:
    names = list(REQUEST_METRICS) + list(LAUNCH_METRICS)
    names += [f"{m}.{s}" for m in [*REQUEST_METRICS, "itl_s"] for s in STATS]
    return names


def check_metric(name: str) -> str | None:
    """None if `name` is a metric, else what is allowed."""
    if name in all_metric_names():
        return None
    return (f"unknown metric {name!r}; allowed: {sorted(REQUEST_METRICS)}, {sorted(LAUNCH_METRICS)}, "
            f"or <metric>.<stat> with metric in {sorted([*REQUEST_METRICS, 'itl_s'])} and stat in {list(STATS)}")


def is_launch_metric(name: str) -> bool:
    return name in LAUNCH_METRICS or "." in name


def needs_slo(name: str) -> bool:
    return name in ("goodput", "slo_attainment")


def base_metric(name: str) -> str:
    """The per-request quantity a metric is built on (for lag checks); throughputs count on e2e."""
    if name in LAUNCH_METRICS:
        return "e2e_s"
    return name.partition(".")[0]


# --------------------------------------------------------------------------- per request


def decode(arrivals: list[float], tokens: list[int], completion: int) -> tuple[int | None, float | None, str | None]:
    """(decode tokens, decode seconds, why unmeasured) of one request, from its token-carrying chunks.

    The decode interval runs from the first chunk carrying tokens to the last; the tokens decoded in
    it are all but the first chunk's (a chunk carries every token the server sent at once, so a
    merged or speculative first chunk is not counted as one token). `completion` is the request's
    total (a server's `usage`), which may exceed the chunks' sum when a server leaves counts out.
    When there is no interval the reason is one of `framework.core.vocabulary.DecodeUnmeasured`.
    """
    timed = [(t, n) for t, n in zip(arrivals, tokens, strict=False) if n > 0]
    if not timed or completion <= 0:
        return None, None, "no_tokens"
    if completion <= 1:
        return None, None, "one_token"
    if len(timed) < 2:
        return None, None, "one_chunk"
    n, span = completion - timed[0][1], timed[-1][0] - timed[0][0]
    if n <= 0:
        return None, None, "one_chunk"
    if span <= 0:
        return None, None, "no_time"
    return n, span, None


def chunks(row: dict[str, Any]) -> tuple[list[float], list[int]]:
    """A request's token-carrying chunks: (model seconds since its send, tokens). On the simulator's
    model clock (``clock: sim_model``) its own timestamps, else the client's wall times x time_scale."""
    if row.get("clock") == "sim_model" and row.get("chunk_model_times_s") is not None:
        return list(row["chunk_model_times_s"]), list(row.get("chunk_model_tokens") or [])
    scale = row.get("time_scale") or 1.0
    return [t * scale for t in row.get("chunk_times_s") or []], list(row.get("chunk_tokens") or [])


def start(row: dict[str, Any]) -> float | None:
    """When the request was sent, model seconds on the launch's clock (the sim's own clock where it has one)."""
    if row.get("clock") == "sim_model" and row.get("model_start_s") is not None:
        return float(row["model_start_s"])
    return row.get("start_s")


def itls(row: dict[str, Any]) -> list[float]:
    """Every gap between consecutive token-carrying chunks of a request, model seconds."""
    times, tokens = chunks(row)
    t = [c for c, n in zip(times, tokens, strict=False) if n > 0]
    return [b - a for a, b in zip(t, t[1:], strict=False)]


def meets_slo(row: dict[str, Any], slo: dict[str, float]) -> bool:
    """An ok request whose every SLO'd figure is known and at most its bound (itl_s: every gap)."""
    if not row.get("ok"):
        return False
    for key, bound in slo.items():
        if key == "itl_s":
            gaps = itls(row)
            if any(g > bound for g in gaps):
                return False
            continue
        v = row.get(key)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v > bound:
            return False
    return True


def decode_parts(row: dict[str, Any]) -> tuple[float, float] | None:
    """(decode tokens, decode seconds) of an ok request row; rows written before the client kept them
    (no `decode_tokens`) are read as the old client measured them: completion_tokens - 1 tokens."""
    tokens, secs = row.get("decode_tokens"), row.get("decode_s")
    if _positive(tokens) and _positive(secs):
        return float(tokens), float(secs)
    rate = row.get("decode_tok_s")
    if tokens is None and _positive(rate) and int(row.get("completion_tokens") or 0) >= 2:
        n = float(row["completion_tokens"]) - 1
        return n, n / float(rate)
    return None


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


# metric -> (numerator, denominator) of a request row: the launch's value is their totals' ratio (docs/workloads.md)
RATIO_METRICS = ("decode_tok_s", "tpot_s", "output_tok_s")


def ratio_parts(name: str, row: dict[str, Any]) -> tuple[float, float] | None:
    """The request's share of its launch's ratio estimate of a rate metric (None: not a ratio metric, or unknown).

    decode_tok_s: (decode tokens, decode seconds); tpot_s: the inverse; output_tok_s: (completion
    tokens, end-to-end seconds). The launch's value sum(numerators) / sum(denominators) weighs each
    request by its work, so one request that arrived in a burst cannot dominate the launch.
    """
    if name in ("decode_tok_s", "tpot_s"):
        parts = decode_parts(row)
        if parts is None:
            return None
        return parts if name == "decode_tok_s" else (parts[1], parts[0])
    if name == "output_tok_s" and _positive(row.get("completion_tokens")) and _positive(row.get("e2e_s")):
        return float(row["completion_tokens"]), float(row["e2e_s"])
    return None


def unmeasured(name: str, row: dict[str, Any]) -> str | None:
    """Why an ok measured request gives no value of metric `name` (None: it gives one, or the metric is the launch's).

    The reason is the row's `decode_unmeasured` where the client said why, else `no_value`.
    """
    base, _, stat = name.partition(".")
    if name in LAUNCH_METRICS or (stat and base not in REQUEST_METRICS and base != "itl_s"):
        return None
    if base == "itl_s":
        ok = bool(itls(row))
    else:
        ok = _positive(row.get(base)) if name in REQUEST_METRICS else (
            isinstance(row.get(base), (int, float)) and math.isfinite(row[base]))
    return None if ok else str(row.get("decode_unmeasured") or "no_value")


# --------------------------------------------------------------------------- per launch


def _stat(values: list[float], stat: str) -> float | None:
    if not values:
        return None
    if stat == "mean":
        return float(np.mean(values))
    return float(np.percentile(values, float(stat[1:])))  # linear interpolation, as numpy's default


def window(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(start, end) of the measured window in model seconds: first measured send to last measured end."""
    measured = [r for r in rows if not r.get("warmup") and start(r) is not None and r.get("e2e_s")]
    if not measured:
        return None
    return min(start(r) for r in measured), max(start(r) + r["e2e_s"] for r in measured)


def launch_value(name: str, rows: Iterable[dict[str, Any]], slo: dict[str, float] | None = None, *,
                 edge_s: float = 0.0) -> float | None:
    """A launch metric from all of the launch's request rows (any phase; the window decides).

    ``edge_s`` > 0: the window counts what happens in (start + edge_s, end + edge_s] (rules version 4;
    module docstring); 0: the old edges."""
    rows = [r for r in rows if r.get("kind", "request") == "request"]
    measured = [r for r in rows if not r.get("warmup")]
    ok = [r for r in measured if r.get("ok")]
    if "." in name:
        base, _, stat = name.partition(".")
        if base == "itl_s":
            values = [g for r in ok for g in itls(r)]
        else:
            values = [float(r[base]) for r in ok if isinstance(r.get(base), (int, float)) and math.isfinite(r[base])]
        return _stat(values, stat)
    if name == "slo_attainment":
        return sum(1 for r in measured if meets_slo(r, slo or {})) / len(measured) if measured else None
    span = window(rows)
    if span is None or span[1] <= span[0]:
        return None
    t0, t1 = span
    dur = t1 - t0

    def inside(t: float, tokens: bool) -> bool:
        if edge_s > 0:
            return t0 + edge_s < t <= t1 + edge_s
        return t0 <= t <= t1 if tokens else t0 < t <= t1 + 1e-9

    if name == "output_throughput":
        tokens = 0
        for r in rows:
            s0 = start(r)
            if s0 is None:
                continue
            times, toks = chunks(r)
            for t, n in zip(times, toks, strict=False):
                if inside(s0 + t, tokens=True):
                    tokens += n
            # an OpenAI stream counts one token per content chunk; its usage total corrects the last chunk
            counted = sum(toks)
            if r.get("ok") and r.get("completion_tokens", counted) != counted and r.get("e2e_s") is not None:
                if inside(s0 + r["e2e_s"], tokens=True):
                    tokens += r["completion_tokens"] - counted
        return tokens / dur
    if name == "request_throughput":
        ended = sum(1 for r in rows if r.get("ok") and start(r) is not None and r.get("e2e_s") is not None
                    and inside(start(r) + r["e2e_s"], tokens=False))
        return ended / dur
    if name == "goodput":
        return sum(1 for r in measured if meets_slo(r, slo or {})) / dur
    raise ValueError(check_metric(name) or f"{name!r} is a per-request metric")


def launch_summary(rows: list[dict[str, Any]], slo: dict[str, float] | None = None, *,
                   edge_s: float = 0.0) -> dict[str, float | None]:
    """Every launch metric of one launch (for the record and the report)."""
    out: dict[str, float | None] = {}
    for base in [*REQUEST_METRICS, "itl_s"]:
        for stat in STATS:
            out[f"{base}.{stat}"] = launch_value(f"{base}.{stat}", rows, slo)
    for name in LAUNCH_METRICS:
        if needs_slo(name) and not slo:
            continue
        out[name] = launch_value(name, rows, slo, edge_s=edge_s)
    return out
