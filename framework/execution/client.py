"""The HTTP workload client: the seed's measurement, made repeatable, on `requests`.

One request = one streaming `POST /generate` with `input_ids` of the workload's prompt length,
`max_new_tokens`, `ignore_eos` and the temperature. Every SSE event's arrival time and token count
is kept, so the derived figures can be recomputed from the raw data:

- TTFT: send to the first event carrying tokens;
- decode tokens/s = (completion_tokens - 1) / (t_last - t_first), the seed's figure;
- TPOT = (t_last - t_first) / (completion_tokens - 1); e2e: send to the end of the stream;
- the accept length from `meta_info` when speculative decoding is on.

Durations are multiplied by `time_scale` (the simulator's speed-up, 1 for real servers) so every
figure is on the model's clock. Errors and streams cut mid-way become failed rows with a reason;
nothing is dropped silently.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

import numpy as np
import requests

from framework.spec import Workload

PROMPT_TOKEN_RANGE = (1000, 30000)  # ordinary vocabulary ids for any modern tokenizer


def prompt_ids(seed: int, index: int, length: int) -> list[int]:
    """A reproducible prompt per (launch seed, request index)."""
    rng = np.random.default_rng([seed, index])
    return [int(x) for x in rng.integers(*PROMPT_TOKEN_RANGE, size=length)]


def generate_body(ids: list[int], workload: Workload) -> dict[str, Any]:
    return {
        "input_ids": ids,
        "sampling_params": {
            "max_new_tokens": workload.output_tokens,
            "temperature": workload.temperature,
            "ignore_eos": workload.ignore_eos,
        },
        "stream": True,
    }


def token_times(times: list[float], tokens: list[int]) -> list[float]:
    """The arrival times of the chunks that carried tokens (the metrics' first and last token)."""
    return [t for t, n in zip(times, tokens) if n > 0]


def summarize_stream(
    times: list[float], tokens: list[int], e2e: float, time_scale: float, meta: dict[str, Any]
) -> dict[str, Any]:
    """Derived per-request figures from raw chunk times (seconds since send) and token counts."""
    completion = int(sum(tokens))
    arrivals = token_times(times, tokens)
    out: dict[str, Any] = {
        "completion_tokens": completion,
        "e2e_s": e2e * time_scale,
        "ttft_s": arrivals[0] * time_scale if arrivals else None,
        "tpot_s": None,
        "decode_tok_s": None,
        "output_tok_s": completion / (e2e * time_scale) if e2e > 0 else None,
        "accept_length": None,
    }
    if len(arrivals) >= 2 and completion >= 2:
        span = (arrivals[-1] - arrivals[0]) * time_scale
        if span > 0:
            out["tpot_s"] = span / (completion - 1)
            out["decode_tok_s"] = (completion - 1) / span
    if meta.get("spec_accept_length") is not None:
        out["accept_length"] = float(meta["spec_accept_length"])
    elif meta.get("spec_verify_ct"):
        out["accept_length"] = completion / float(meta["spec_verify_ct"])
    return out


def measure_request(
    session: requests.Session,
    base_url: str,
    body: dict[str, Any],
    timeout_s: float,
    time_scale: float = 1.0,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Send one streaming /generate and time every event; never raises for server-side trouble."""
    times: list[float] = []
    tokens: list[int] = []
    meta: dict[str, Any] = {}
    sent_at = datetime.now(timezone.utc).isoformat()
    prompt_tokens = len(body.get("input_ids") or [])
    t0 = time.perf_counter()
    error: str | None = None
    error_class: str | None = None
    finished = False
    seen = 0
    try:
        with session.post(
            base_url + "/generate", json=body, stream=True, timeout=(10.0, timeout_s), headers=headers
        ) as resp:
            if resp.status_code != 200:
                error, error_class = f"HTTP {resp.status_code}: {resp.text[:300]}", "http_error"
            else:
                buffer = b""
                for piece in resp.iter_content(chunk_size=None):
                    now = time.perf_counter() - t0
                    buffer += piece
                    while b"\n\n" in buffer:
                        event, buffer = buffer.split(b"\n\n", 1)
                        data = event.strip().removeprefix(b"data:").strip()
                        if not data:
                            continue
                        if data == b"[DONE]":
                            finished = finished or bool(meta)
                            continue
                        payload = json.loads(data)
                        meta = payload.get("meta_info", {}) or {}
                        count = int(meta.get("completion_tokens", seen))
                        times.append(now)
                        tokens.append(count - seen)
                        seen = count
                        if meta.get("finish_reason"):
                            finished = True
                    if time.perf_counter() - t0 > timeout_s:
                        error, error_class = f"timed out after {timeout_s:.0f} s", "timeout"
                        break
                if error is None and not finished:
                    error = f"stream ended before the request finished ({seen} tokens received)"
                    error_class = "stream_cut"
    except (requests.RequestException, ValueError) as exc:
        if isinstance(exc, requests.exceptions.ChunkedEncodingError):
            error = f"stream ended before the request finished ({seen} tokens received): {exc}"
            error_class = "stream_cut"
        elif isinstance(exc, requests.Timeout) or "timed out" in str(exc):
            error, error_class = f"timed out: no data for {timeout_s:g} s ({seen} tokens received)", "timeout"
        elif not isinstance(exc, requests.RequestException):  # ValueError: an event that is not JSON
            error, error_class = f"malformed event after {seen} tokens: {type(exc).__name__}: {exc}", "malformed_stream"
        else:
            error, error_class = f"{type(exc).__name__}: {exc}", "connection"
    e2e = time.perf_counter() - t0
    row: dict[str, Any] = {
        "ok": error is None,
        "error": error,
        "error_class": error_class,  # http_error, timeout, stream_cut, malformed_stream or connection
        "prompt_tokens": int(meta.get("prompt_tokens", prompt_tokens)),
        "chunk_times_s": [round(t, 7) for t in times],
        "chunk_tokens": tokens,
        "time_scale": time_scale,
        "sent_at": sent_at,
        "server_request_id": meta.get("id"),
        "sim_max_lag_s": meta.get("sim_max_lag_s"),
        "sim_first_lag_s": meta.get("sim_first_lag_s"),
        "sim_last_lag_s": meta.get("sim_last_lag_s"),
    }
    row.update(summarize_stream(times, tokens, e2e, time_scale, meta))
    return row


def run_workload(
    base_url: str,
    workload: Workload,
    *,
    requests_n: int,
    warmup: int,
    seed: int,
    time_scale: float = 1.0,
    api_key: str | None = None,
    on_row: Callable[[int, bool, dict[str, Any]], None],
) -> None:
    """Warm-up requests first, then `requests_n` measured ones, `workload.concurrency` at a time.

    Each stream has its own thread and session. `on_row(index, warmup, row)` is called as soon
    as a request ends (the caller writes it to disk at once).
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None

    def phase(first: int, count: int, is_warmup: bool) -> None:
        next_index = iter(range(first, first + count))
        lock = threading.Lock()

        def worker() -> None:
            with requests.Session() as session:
                while True:
                    with lock:
                        index = next(next_index, None)
                    if index is None:
                        return
                    body = generate_body(prompt_ids(seed, index, workload.prompt_tokens), workload)
                    row = measure_request(session, base_url, body, workload.request_timeout_s, time_scale, headers)
                    on_row(index, is_warmup, row)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(workload.concurrency, count))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    if warmup:
        phase(0, warmup, True)
    phase(warmup, requests_n, False)
