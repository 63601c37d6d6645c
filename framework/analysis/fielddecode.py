"""A request's decode as the field defines it: TPOT = (e2e - ttft) / (n - 1) (rules version 4, `field_decode`).

The client's own decode (framework.core.metrics.decode) runs from the first token-carrying read to the
last and counts the tokens after the first read, so it differs from the field's TPOT (vLLM's `vllm bench
serve`, SGLang's bench_serving: (latency - ttft) / (output_len - 1)) whenever the first read holds
several tokens, and it has no value when every token came in one read. Losing those requests is
survivorship: they are the fast ones (a server that sends a request's tokens together sends them when
it is ahead), so the survivors' TPOT is biased up (+37.5% against vLLM's own on its CPU backend).

`with_field_decode` rewrites an ok request row's decode figures by the field's definition (a row without a
token count, TTFT and end-to-end time, which the client always writes, keeps its own): decode tokens
n - 1, decode seconds e2e - ttft, `tpot_s` their ratio and `decode_tok_s` its inverse. Every request with
two or more tokens then has a decode, including one whose tokens came in one read (its decode seconds
are the few it spent after its first token), so a launch's ratio of totals (`ratio_rates`),
sum(e2e - ttft) / sum(n - 1), is taken over all of its requests and cannot lose the fast ones. Pure.
"""

from __future__ import annotations

import math
from typing import Any

FIELD_METRICS = ("tpot_s", "decode_tok_s")  # the metrics (and their `.<stat>`s) the definition changes


def _number(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def field_parts(row: dict[str, Any]) -> tuple[int, float] | str | None:
    """(n - 1 decode tokens, e2e - ttft decode seconds) of a request, or why it has none (a DecodeUnmeasured);
    None for a row without the figures the definition needs (no token count, TTFT or end-to-end time)."""
    n = _number(row.get("completion_tokens"))
    e2e, ttft = _number(row.get("e2e_s")), _number(row.get("ttft_s"))
    if n is None or n <= 0 or ttft is None or e2e is None:
        return None
    if n == 1:
        return "one_token"
    if e2e - ttft <= 0:
        return "no_time"
    return int(n) - 1, e2e - ttft


def with_field_decode(row: dict[str, Any]) -> dict[str, Any]:
    """An ok request row with its decode figures by the field's definition (a copy; other rows as they are)."""
    if row.get("kind", "request") != "request" or not row.get("ok"):
        return row
    parts = field_parts(row)
    if parts is None:  # nothing to compute it from (a row the client never wrote so): as it is
        return row
    if isinstance(parts, str):  # the client's own reason where it gave one (one_chunk says more than no_time)
        return {**row, "tpot_s": None, "decode_tok_s": None, "decode_tokens": None, "decode_s": None,
                "decode_unmeasured": row.get("decode_unmeasured") or parts}
    tokens, secs = parts
    return {**row, "tpot_s": secs / tokens, "decode_tok_s": tokens / secs, "decode_tokens": tokens,
            "decode_s": secs, "decode_unmeasured": None}


def changes(metric: str) -> bool:
    """Whether the field's definition changes `metric`'s values (tpot_s, decode_tok_s and their stats)."""
    return metric.partition(".")[0] in FIELD_METRICS
