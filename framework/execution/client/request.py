"""One streaming request: its JSON body, and sending it with every event timed (aiohttp).

The hot path does as little per token as it can: each batch of bytes the socket delivers is stamped
in the connection's `data_received` (client.arrivals), the reading coroutine hands the bytes with their
stamps to stream.ChunkReader, which splits events on bytes and counts plain ones without decoding
their JSON; nothing else runs per token until the stream has ended.

The measurement is a RequestRow (framework.core.trials), not yet stamped by its launch. Errors and streams cut
mid-way become failed results with a reason (`error_class`: http_error, context_length, timeout, stream_cut,
malformed_stream, connection, connection_refused or cancelled); nothing is dropped silently.

A request whose connection failed before any byte of the response (a pooled connection the server had
closed at its keep-alive) is sent again on a fresh connection and timed from that send; its row counts
the retries (framework.execution.client.connection says why that is safe).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np

from framework.core.trials import RequestRow
from framework.core.vocabulary import RequestErrorClass
from framework.core.workload import (
    ENDPOINT_PATHS,
    PROMPT_TOKEN_RANGE,
    Endpoint,
    Workload,
)
from framework.execution.client import connection
from framework.execution.client.arrivals import log_of
from framework.execution.client.capture import OutputCapture
from framework.execution.client.refusal import refused
from framework.execution.client.stream import ChunkReader, MalformedEvent, StreamParser, clock_figures


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


async def measure_request(session: Any, base_url: str, body: dict[str, Any] | bytes, timeout_s: float,
                          time_scale: float = 1.0, headers: dict[str, str] | None = None,
                          endpoint: Endpoint = "generate", t_origin: float | None = None,
                          sent: dict[str, float] | None = None,
                          capture: OutputCapture | None = None) -> RequestRow:
    """Send one streaming request and time every event; never raises for server-side trouble.

    `session` is an aiohttp ClientSession; `body` a JSON body, or its bytes (encoded before the clock
    started); `t_origin` (perf_counter) dates the send on the launch's clock (`start_s`, model seconds).
    `sent`: a dict the session's trace stamps when the request's headers are written (the open loop's
    lateness, framework.execution.client.openloop.send_stamps); cleared before each attempt.
    `capture` keeps what it generated (client.capture; an outputs prediction's), in the row's `output`.
    """
    import aiohttp

    parser = StreamParser(endpoint, capture)
    reader = ChunkReader(parser)
    times, tokens = reader.times, reader.tokens
    payload = json.dumps(body, separators=(",", ":")).encode() if isinstance(body, dict) else body
    send_headers = {"Content-Type": "application/json", **(headers or {})}
    if not isinstance(body, dict):
        body = {}
    prompt = body.get("input_ids") or body.get("prompt") or body.get("text") or ""
    error: str | None = None
    error_class: RequestErrorClass | None = None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout_s)
    sender, fresh, retries = session, None, 0
    while True:  # once, or again on a fresh connection after one that failed before any response byte
        sent_at = datetime.now(timezone.utc).isoformat()
        if sent is not None:
            sent.clear()  # a retry's stamp is its own send's (its fresh session has no trace: none)
        traced = {} if sent is None or sender is not session else {"trace_request_ctx": sent}
        t0 = time.perf_counter()
        responded = False
        last_read: float | None = None  # when the stream's last bytes arrived (the request's end, below)
        try:
            async with sender.post(base_url + ENDPOINT_PATHS[endpoint], data=payload, headers=send_headers,
                                   timeout=timeout, **traced) as resp:
                responded = True
                connection.learn(session, getattr(resp, "headers", None))
                if resp.status != 200:
                    error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                    error_class = "context_length" if CONTEXT_LENGTH.search(error) else "http_error"
                else:
                    arrivals = log_of(resp)
                    consumed = 0
                    async for piece in resp.content.iter_any():
                        now = time.perf_counter() - t0
                        if arrivals:  # stamped as the socket's data arrived: each arrival its own chunk
                            end, at = consumed + len(piece), 0
                            while arrivals and arrivals[0][1] is resp.content and arrivals[0][2] <= end:
                                t, _, total, waited = arrivals.popleft()
                                if total - consumed > at:
                                    reader.read(t - t0, piece[at:total - consumed], waited)
                                    last_read = t - t0
                                    at = total - consumed
                            if at < len(piece):
                                reader.read(now, piece[at:])
                                last_read = now
                            consumed = end
                        else:
                            reader.read(now, piece)
                            last_read = now
                            consumed += len(piece)
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
        except MalformedEvent as exc:
            error, error_class = str(exc), "malformed_stream"
        except asyncio.TimeoutError:
            error = f"timed out: no data for {timeout_s:g} s ({sum(tokens)} tokens received)"
            error_class = "timeout"
        except aiohttp.ClientPayloadError as exc:
            error = f"stream ended before the request finished ({sum(tokens)} tokens received): {exc}"
            error_class = "stream_cut"
        except (aiohttp.ClientError, OSError) as exc:
            if not responded and retries < connection.MAX_RETRIES and connection.retryable(exc):
                retries += 1  # the server answered nothing on it: send again, on a connection of its own
                sender = fresh = fresh or connection.fresh_session()
                continue
            gone = refused(exc)  # nothing listened: the server is gone, not cutting streams
            error_class = "connection_refused" if gone else "connection"
            error = ("connection refused: " if gone else "") + f"{type(exc).__name__}: {exc}"
        break
    if fresh is not None:
        await fresh.close()
    # The request ends when its last bytes arrived, not when the client got round to closing the stream
    # (the loop's turn after it, the connection's release: 28% of the decode span at 256 streams on a loaded
    # core, docs/results/selfcheck.md); e2e - ttft is then the field's decode time (`vllm bench serve` stamps
    # its latency at the last chunk too). A request without a read ends now.
    e2e = last_read if error is None and last_read is not None else time.perf_counter() - t0
    meta = parser.meta
    completion = None
    source = "meta_info" if endpoint == "generate" else "chunks"
    if parser.usage and parser.usage.get("completion_tokens") is not None:
        completion, source = int(parser.usage["completion_tokens"]), "usage"
        if parser.usage_behind:  # the last chunks were counted from their bytes: their cumulative count
            completion = parser.seen
    prompt_tokens = meta.get("prompt_tokens") or (parser.usage or {}).get("prompt_tokens")
    figures = clock_figures(times, tokens, e2e, time_scale, meta, completion, parser, reader.events)
    if error is not None:  # a failed request is lost as a whole: its error says why, not a decode reason
        figures["decode_unmeasured"] = None
    return RequestRow(
        ok=error is None,
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
        read_events=reader.events, read_waits=reader.waits,
        retries=retries or None,
        output=capture.record() if capture is not None else None,
        **figures,
    )
