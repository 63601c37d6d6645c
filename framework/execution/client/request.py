"""One streaming request: its JSON body, and sending it with every event timed (aiohttp).

The measurement is a RequestResult (framework.execution.client.result). Errors and streams cut
mid-way become failed results with a reason (`error_class`: http_error, context_length, timeout, stream_cut,
malformed_stream, connection or cancelled); nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np

from framework.core.workload import (
    ENDPOINT_PATHS,
    PROMPT_TOKEN_RANGE,
    Endpoint,
    Workload,
)
from framework.execution.client.result import ErrorClass, RequestResult
from framework.execution.client.stream import StreamParser, clock_figures, sse_data


def prompt_ids(seed: int, index: int, length: int) -> list[int]:
    """A reproducible prompt per (launch seed, request index)."""
    rng = np.random.default_rng([seed, index])
    return [int(x) for x in rng.integers(*PROMPT_TOKEN_RANGE, size=length)]


def request_body(endpoint: Endpoint, prompt: list[int] | str, output_tokens: int, workload: Workload,
                 model: str | None = None) -> dict[str, Any]:
    """The JSON body of one streaming request to `endpoint` (see ENDPOINT_PATHS)."""
    if endpoint == "generate":
        key = "text" if isinstance(prompt, str) else "input_ids"
        return {key: prompt, "stream": True, "sampling_params": {
            "max_new_tokens": output_tokens, "temperature": workload.temperature, "ignore_eos": workload.ignore_eos}}
    body: dict[str, Any] = {
        "max_tokens": output_tokens, "temperature": workload.temperature, "ignore_eos": workload.ignore_eos,
        # per-chunk usage (vLLM, SGLang): each chunk's token count, so a merged chunk counts every token it carries
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if model:
        body["model"] = model
    if endpoint == "chat":
        if not isinstance(prompt, str):
            raise ValueError("the chat endpoint takes text prompts")
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def generate_body(ids: list[int], workload: Workload) -> dict[str, Any]:
    """A /generate body for a fixed-length workload (kept for callers of the single-request path)."""
    out = workload.output_tokens if isinstance(workload.output_tokens, int) else 256
    return request_body("generate", ids, out, workload)


# SGLang's and vLLM's words for a request longer than the model's context (framework.servers.api.check_length)
CONTEXT_LENGTH = re.compile(r"context length|maximum context|max_model_len", re.IGNORECASE)


class _Malformed(Exception):
    """An SSE event that is not the JSON the endpoint sends."""


async def measure_request(session: Any, base_url: str, body: dict[str, Any] | bytes, timeout_s: float,
                          time_scale: float = 1.0, headers: dict[str, str] | None = None,
                          endpoint: Endpoint = "generate", t_origin: float | None = None) -> RequestResult:
    """Send one streaming request and time every event; never raises for server-side trouble.

    `session` is an aiohttp ClientSession; `body` a JSON body, or its bytes (encoded before the clock
    started); `t_origin` (perf_counter) dates the send on the launch's clock (`start_s`, model seconds).
    """
    import aiohttp

    times: list[float] = []
    tokens: list[int] = []
    read_events: list[int] = []  # token-carrying SSE events per chunk (the self-check's events per read)
    parser = StreamParser(endpoint)
    payload = json.dumps(body, separators=(",", ":")).encode() if isinstance(body, dict) else body
    send_headers = {"Content-Type": "application/json", **(headers or {})}
    if not isinstance(body, dict):
        body = {}
    sent_at = datetime.now(timezone.utc).isoformat()
    prompt = body.get("input_ids") or body.get("prompt") or body.get("text") or ""
    t0 = time.perf_counter()
    error: str | None = None
    error_class: ErrorClass | None = None
    try:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout_s)
        async with session.post(base_url + ENDPOINT_PATHS[endpoint], data=payload, headers=send_headers,
                                timeout=timeout) as resp:
            if resp.status != 200:
                error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                error_class = "context_length" if CONTEXT_LENGTH.search(error) else "http_error"
            else:
                buffer = b""
                async for piece in resp.content.iter_any():
                    now = time.perf_counter() - t0
                    buffer += piece
                    got, events, carrying = 0, 0, 0
                    while b"\n\n" in buffer:  # events read together arrived together: one chunk
                        event, buffer = buffer.split(b"\n\n", 1)
                        data = sse_data(event)
                        if not data or data == b"[DONE]":
                            continue
                        try:
                            new = parser.event(data)
                        except (ValueError, TypeError, AttributeError) as exc:  # not the JSON event expected
                            raise _Malformed(f"malformed event after {sum(tokens) + got} tokens: "
                                             f"{type(exc).__name__}: {exc}") from None
                        got += new
                        carrying += new > 0
                        events += 1
                    if got or (events and endpoint == "generate"):
                        times.append(now)
                        tokens.append(got)
                        read_events.append(carrying)
                    if now > timeout_s:
                        error, error_class = f"timed out after {timeout_s:.0f} s", "timeout"
                        break
                # Yield before the work that ends a stream (its row, the next request's send): in a burst of
                # streams ending together, every other stream's last read is then stamped first, not after it.
                await asyncio.sleep(0)
                if error is None and parser.error is not None:  # the server said why in the stream
                    error = f"the server refused the request: {parser.error}"
                    error_class = "context_length" if CONTEXT_LENGTH.search(parser.error) else "http_error"
                if error is None and not parser.finished:
                    error = f"stream ended before the request finished ({sum(tokens)} tokens received)"
                    error_class = "stream_cut"
    except asyncio.CancelledError:  # only the closed loop cancels: a cool-down request after the window
        error = f"cancelled: the measured window had ended ({sum(tokens)} tokens received)"
        error_class = "cancelled"
    except _Malformed as exc:
        error, error_class = str(exc), "malformed_stream"
    except asyncio.TimeoutError:
        error = f"timed out: no data for {timeout_s:g} s ({sum(tokens)} tokens received)"
        error_class = "timeout"
    except aiohttp.ClientPayloadError as exc:
        error = f"stream ended before the request finished ({sum(tokens)} tokens received): {exc}"
        error_class = "stream_cut"
    except (aiohttp.ClientError, OSError) as exc:
        error, error_class = f"{type(exc).__name__}: {exc}", "connection"
    e2e = time.perf_counter() - t0
    meta = parser.meta
    completion = None
    source = "meta_info" if endpoint == "generate" else "chunks"
    if parser.usage and parser.usage.get("completion_tokens") is not None:
        completion, source = int(parser.usage["completion_tokens"]), "usage"
    prompt_tokens = meta.get("prompt_tokens") or (parser.usage or {}).get("prompt_tokens")
    figures = clock_figures(times, tokens, e2e, time_scale, meta, completion, parser)
    if error is not None:  # a failed request is lost as a whole: its error says why, not a decode reason
        figures["decode_unmeasured"] = None
    return RequestResult(
        error=error,
        error_class=error_class,
        endpoint=endpoint,
        prompt_tokens=int(prompt_tokens if prompt_tokens is not None else
                          (len(prompt) if isinstance(prompt, list) else 0)),
        token_count_source=source,
        chunk_times_s=[round(t, 7) for t in times],
        chunk_tokens=tokens,
        time_scale=time_scale,
        sent_at=sent_at,
        start_s=None if t_origin is None else round((t0 - t_origin) * time_scale, 7),
        server_request_id=meta.get("id"),
        sim_max_lag_s=meta.get("sim_max_lag_s"),
        sim_first_lag_s=meta.get("sim_first_lag_s"),
        sim_last_lag_s=meta.get("sim_last_lag_s"),
        read_events=read_events,
        **figures,
    )
