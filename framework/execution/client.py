"""The HTTP workload client: executes a workload plan (framework.core.workload) over real HTTP, on asyncio.

One event loop drives every stream (aiohttp, one shared connection pool without a cap): threads
with a blocking client could not keep 256 streams timed on 2 cores (benchmarks/client_fidelity.py
measures both against the simulator's ground truth; docs/results/client_fidelity.md).

Endpoints (`workload.endpoint`, else the backend's protocol):

- `generate`: SGLang's native streaming `POST /generate` (`input_ids` or `text`); token counts
  from the cumulative `meta_info.completion_tokens` of every event;
- `completions` / `chat`: OpenAI `POST /v1/completions` and `/v1/chat/completions` with
  `stream: true` and `stream_options.include_usage`; every chunk with non-empty content is a token
  arrival (the first one is the TTFT), the total comes from the final `usage` (else the number of
  content chunks, and the row says so).

Every chunk's arrival time and token count is kept, so the derived figures can be recomputed from
the raw data (framework.core.metrics). Durations are multiplied by `time_scale` (the simulator's
speed-up, 1 for real servers) so every figure is on the model's clock. Errors and streams cut
mid-way become failed rows with a reason; nothing is dropped silently.

The client times itself too: an open loop's lateness (scheduled against actual send, wall
seconds) and the event loop's lag (how long a ready callback waits to run), so a run can say when
the client, not the server, was the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import requests

from framework.core.hashing import sha256_file
from framework.core.workload import (
    ENDPOINT_PATHS, PROMPT_TOKEN_RANGE, DatasetRow, Endpoint, Plan, PlannedRequest, Workload, endpoint_of,
    make_plan, parse_dataset,
)

if TYPE_CHECKING:  # the backend table imports the launcher; the client needs only its type
    from framework.execution.backends import BackendSettings

__all__ = ["PROMPT_TOKEN_RANGE", "run_workload", "request_body", "measure_request", "summarize_stream",
           "token_times", "load_dataset", "prompt_ids", "generate_body"]

LOOP_LAG_PERIOD_S = 0.01
# The sim's extension (other servers ignore it): "next" = this closed-loop stream sends another request
# the moment this one ends, so the simulated clock waits for it instead of counting the client's wall time.
CLOSED_LOOP_HEADER = "X-Sim-Closed-Loop"
SPIN_BEFORE_SEND_S = 0.0012  # the event loop's timers round up to 1 ms: the last stretch before a send yields


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
        "stream": True, "stream_options": {"include_usage": True},
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


def token_times(times: list[float], tokens: list[int]) -> list[float]:
    """The arrival times of the chunks that carried tokens (the metrics' first and last token)."""
    return [t for t, n in zip(times, tokens) if n > 0]


def summarize_stream(times: list[float], tokens: list[int], e2e: float, time_scale: float, meta: dict[str, Any],
                     completion: int | None = None) -> dict[str, Any]:
    """Derived per-request figures from raw chunk times (seconds since send) and token counts.

    `completion` overrides the sum of chunk tokens (an OpenAI stream's `usage`).
    """
    completion = int(sum(tokens)) if completion is None else int(completion)
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


class _Malformed(Exception):
    """An SSE event that is not the JSON the endpoint sends."""


class _Stream:
    """Per-endpoint parsing of SSE events into (token count) and the final metadata."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.meta: dict[str, Any] = {}
        self.seen = 0
        self.finished = False
        self.usage: dict[str, Any] | None = None
        # the simulator's own clock, per token-carrying event: (sim_model_t, tokens); None once an event lacks it
        self.model_events: list[tuple[float, int]] | None = []

    def _stamp(self, model_t: Any, tokens: int) -> None:
        if self.model_events is None or not tokens:
            return
        if model_t is None:
            self.model_events = None
        else:
            self.model_events.append((float(model_t), tokens))

    def event(self, data: bytes) -> int:
        """Tokens carried by one event's payload (0 for role-only, empty or usage-only chunks)."""
        payload = json.loads(data)
        if self.endpoint == "generate":
            meta = payload.get("meta_info") or {}
            self.meta = meta
            count = int(meta.get("completion_tokens", self.seen))
            new, self.seen = count - self.seen, count
            if meta.get("finish_reason"):
                self.finished = True
            self._stamp(meta.get("sim_model_t"), new)
            return new
        if payload.get("usage"):
            self.usage = payload["usage"]
        for key in ("sim_mean_batch", "sim_arrival_model_s"):  # the sim's extra keys on OpenAI chunks
            if key in payload:
                self.meta[key] = payload[key]
        choices = payload.get("choices") or []
        if not choices:
            return 0
        choice = choices[0]
        text = (choice.get("delta") or {}).get("content") if self.endpoint == "chat" else choice.get("text")
        if choice.get("finish_reason"):
            self.finished = True
        if text:
            self._stamp(payload.get("sim_model_t"), 1)
            return 1
        return 0


def sse_data(event: bytes) -> bytes:
    """The data of one server-sent event; b"" for a comment-only event.

    Lines starting with ":" are SSE comments (sse-starlette's keep-alive `: ping - <time>`, which
    llama-cpp-python's server sends every 15 s of a stream), and `event:`, `id:` and `retry:`
    lines carry no data; none of them is a token.
    """
    lines = [ln for ln in event.strip().splitlines() if not ln.startswith((b":", b"event:", b"id:", b"retry:"))]
    return b"\n".join(ln.removeprefix(b"data:").strip() for ln in lines)


async def measure_request(session: Any, base_url: str, body: dict[str, Any] | bytes, timeout_s: float,
                          time_scale: float = 1.0, headers: dict[str, str] | None = None,
                          endpoint: Endpoint = "generate", t_origin: float | None = None) -> dict[str, Any]:
    """Send one streaming request and time every event; never raises for server-side trouble.

    `session` is an aiohttp ClientSession; `body` a JSON body, or its bytes (encoded before the clock
    started); `t_origin` (perf_counter) dates the send on the launch's clock (`start_s`, model seconds).
    """
    import aiohttp

    times: list[float] = []
    tokens: list[int] = []
    parser = _Stream(endpoint)
    payload = json.dumps(body, separators=(",", ":")).encode() if isinstance(body, dict) else body
    send_headers = {"Content-Type": "application/json", **(headers or {})}
    if not isinstance(body, dict):
        body = {}
    sent_at = datetime.now(timezone.utc).isoformat()
    prompt = body.get("input_ids") or body.get("prompt") or body.get("text") or ""
    t0 = time.perf_counter()
    error: str | None = None
    error_class: str | None = None
    try:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout_s)
        async with session.post(base_url + ENDPOINT_PATHS[endpoint], data=payload, headers=send_headers,
                                timeout=timeout) as resp:
            if resp.status != 200:
                error, error_class = f"HTTP {resp.status}: {(await resp.text())[:300]}", "http_error"
            else:
                buffer = b""
                async for piece in resp.content.iter_any():
                    now = time.perf_counter() - t0
                    buffer += piece
                    got, events = 0, 0
                    while b"\n\n" in buffer:  # events read together arrived together: one chunk
                        event, buffer = buffer.split(b"\n\n", 1)
                        data = sse_data(event)
                        if not data or data == b"[DONE]":
                            continue
                        try:
                            got += parser.event(data)
                        except (ValueError, TypeError, AttributeError) as exc:  # not the JSON event expected
                            raise _Malformed(f"malformed event after {sum(tokens) + got} tokens: "
                                             f"{type(exc).__name__}: {exc}") from None
                        events += 1
                    if got or (events and endpoint == "generate"):
                        times.append(now)
                        tokens.append(got)
                    if now > timeout_s:
                        error, error_class = f"timed out after {timeout_s:.0f} s", "timeout"
                        break
                # Yield before the work that ends a stream (its row, the next request's send): in a burst of
                # streams ending together, every other stream's last read is then stamped first, not after it.
                await asyncio.sleep(0)
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
    row: dict[str, Any] = {
        "ok": error is None,
        "error": error,
        "error_class": error_class,  # http_error, timeout, stream_cut, malformed_stream, connection or cancelled
        "endpoint": endpoint,
        "prompt_tokens": int(prompt_tokens if prompt_tokens is not None else
                             (len(prompt) if isinstance(prompt, list) else 0)),
        "token_count_source": source,
        "chunk_times_s": [round(t, 7) for t in times],
        "chunk_tokens": tokens,
        "time_scale": time_scale,
        "sent_at": sent_at,
        "start_s": None if t_origin is None else round((t0 - t_origin) * time_scale, 7),
        "server_request_id": meta.get("id"),
        "sim_max_lag_s": meta.get("sim_max_lag_s"),
        "sim_first_lag_s": meta.get("sim_first_lag_s"),
        "sim_last_lag_s": meta.get("sim_last_lag_s"),
    }
    row.update(clock_figures(times, tokens, e2e, time_scale, meta, completion, parser))
    return row


def clock_figures(times: list[float], tokens: list[int], e2e: float, time_scale: float, meta: dict[str, Any],
                  completion: int | None, parser: _Stream) -> dict[str, Any]:
    """The request's figures on the model's clock.

    When every token-carrying event carries the simulator's own timestamp (``sim_model_t``: model
    seconds from the request's arrival at its engine), the figures are taken from those: the client
    measures the schedule the server ran, and what cannot be scaled (HTTP, parsing, the event loops'
    wake-ups: a few ms of wall time, x the speed-up) stays out. The wall-clock figures (x
    ``time_scale``) are kept beside them as ``wall_*``. Any other server: the wall clock, as always.
    docs/model.md, "Timing".
    """
    wall = summarize_stream(times, tokens, e2e, time_scale, meta, completion)
    events = parser.model_events
    if not events or not parser.finished:
        return {**wall, "clock": "wall"}
    m_times, m_tokens = [t for t, _ in events], [n for _, n in events]
    out = summarize_stream(m_times, m_tokens, m_times[-1], 1.0, meta, completion)
    out.update(clock="sim_model", chunk_model_times_s=[round(t, 7) for t in m_times], chunk_model_tokens=m_tokens)
    out.update({f"wall_{k}": wall[k] for k in ("ttft_s", "tpot_s", "e2e_s", "decode_tok_s", "output_tok_s")})
    for key in ("sim_mean_batch", "sim_arrival_model_s"):
        if meta.get(key) is not None:
            out[key] = meta[key]
    return out


# --------------------------------------------------------------------------- datasets


def load_dataset(path: str | Path, fmt: str = "auto") -> tuple[list[DatasetRow], dict[str, Any]]:
    """A dataset file's rows and what the record keeps of it (path, sha256). Raises ValueError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {p}: {exc}") from None
    try:
        rows = parse_dataset(text, fmt)
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: {exc}") from None
    return rows, {"path": str(p), "sha256": sha256_file(p)}


def resolve_plan(workload: Workload, *, requests_n: int, warmup: int, seed: int,
                 base_dir: Path | None = None) -> Plan:
    """The launch's plan, with the dataset read from disk where the workload names one."""
    if workload.dataset is None:
        return make_plan(workload, requests_n=requests_n, warmup=warmup, seed=seed)
    path = Path(workload.dataset.path)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    rows, info = load_dataset(path, workload.dataset.format)
    return make_plan(workload, requests_n=requests_n, warmup=warmup, seed=seed, dataset=rows, dataset_info=info)


# --------------------------------------------------------------------------- executing a plan


class _LoopLag:
    """How long a callback made ready waits before the loop runs it, sampled every 10 ms."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(LOOP_LAG_PERIOD_S)
            done = loop.create_future()
            t = time.perf_counter()
            loop.call_soon(lambda: done.done() or done.set_result(time.perf_counter() - t))
            self.samples.append(await done)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():  # our own cancellation (an interrupt): pass it on
                    raise


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"n": len(values), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(np.max(values))}


CLIENT_LATE_WARN_S = 0.001  # median open-loop send lateness above this: the client could not keep the schedule
LOOP_LAG_WARN_SHARE = 0.01  # median loop lag above this share of the median request's first-to-last-token span


def client_health(lateness: list[float], loop_lag: list[float], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The client's own timing: send lateness, loop lag, and whether it was the bottleneck (pure).

    The loop's lag can move a wall-clock figure by itself at most, so it counts against the span a
    TPOT is measured over; rows whose figures come from the server's own clock (the sim's model
    clock, `clock: sim_model`) do not depend on the client's reads, only on its sends.
    """
    gaps, spans = [], []
    for r in rows:
        if r.get("clock") == "sim_model":
            continue
        t = token_times(r.get("chunk_times_s") or [], r.get("chunk_tokens") or [])
        gaps += [b - a for a, b in zip(t, t[1:])]
        if len(t) >= 2:
            spans.append(t[-1] - t[0])
    median_gap = statistics.median(gaps) if gaps else None
    median_span = statistics.median(spans) if spans else None
    late, lag = _quantiles(lateness), _quantiles(loop_lag)
    reasons = []
    if late["p50"] is not None and late["p50"] > CLIENT_LATE_WARN_S:
        reasons.append(f"median send lateness {late['p50'] * 1e3:.2f} ms > {CLIENT_LATE_WARN_S * 1e3:g} ms")
    if lag["p50"] is not None and median_span and lag["p50"] > LOOP_LAG_WARN_SHARE * median_span:
        reasons.append(f"median event-loop lag {lag['p50'] * 1e3:.3f} ms > {LOOP_LAG_WARN_SHARE:.0%} of the median "
                       f"first-to-last-token span ({median_span * 1e3:.1f} ms)")
    return {"send_lateness_wall_s": late, "loop_lag_wall_s": lag, "median_chunk_gap_wall_s": median_gap,
            "median_span_wall_s": median_span, "bottleneck": bool(reasons), "reasons": reasons}


async def _execute(plan: Plan, base_url: str, workload: Workload, endpoint: Endpoint, model: str | None,
                   time_scale: float, headers: dict[str, str] | None,
                   on_row: Callable[[int, bool, dict[str, Any]], None]) -> dict[str, Any]:
    import aiohttp

    lag = _LoopLag()
    lag.start()
    lateness: list[float] = []
    rows: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    t_origin = time.perf_counter()
    origin: dict[str, float] = {}  # the sim's model clock at this launch's start (set by the first row)

    encoded = {req.index: json.dumps(request_body(endpoint, req.prompt, req.output_tokens, workload, model),
                                     separators=(",", ":")).encode() for req in plan.requests}

    async def one(session: aiohttp.ClientSession, req: PlannedRequest, extra: dict[str, Any],
                  more: bool = False) -> dict[str, Any]:
        hdrs = {**(headers or {}), CLOSED_LOOP_HEADER: "next"} if more else headers
        row = await measure_request(session, base_url, encoded.pop(req.index), workload.request_timeout_s,
                                    time_scale, hdrs, endpoint, t_origin)
        if not row["prompt_tokens"]:
            row["prompt_tokens"] = req.prompt_tokens
        row.update(extra, phase=req.phase, planned_prompt_tokens=req.prompt_tokens,
                   planned_output_tokens=req.output_tokens)
        _model_start(row, origin)
        if req.dataset_row is not None:
            row["dataset_row"] = req.dataset_row
        if req.phase == "measured":
            rows.append(row)
        on_row(req.index, req.phase != "measured", row)
        return row

    async with aiohttp.ClientSession(connector=connector) as session:
        await _open_connections(session, base_url, headers, min(len(plan.requests), plan.concurrency or 16, 256))
        t_origin = time.perf_counter()
        if plan.mode == "closed":
            await _closed_loop(plan, session, one)
        else:
            await _open_loop(plan, session, one, time_scale, t_origin, lateness)
    await lag.stop()
    return client_health(lateness, lag.samples, rows)


def _model_start(row: dict[str, Any], origin: dict[str, float]) -> None:
    """On the sim's model clock, the send time (``model_start_s``) is the request's arrival on the engine's
    clock, from one origin per launch (aligned with ``start_s`` at the first row), so windows and
    throughputs use one clock with the figures."""
    arrival = row.get("sim_arrival_model_s")
    if row.get("clock") != "sim_model" or arrival is None or row.get("start_s") is None:
        return
    origin.setdefault("t", float(arrival) - float(row["start_s"]))
    row["model_start_s"] = round(float(arrival) - origin["t"], 7)


async def _closed_loop(plan: Plan, session: Any, one: Callable) -> None:
    """`concurrency` streams; each sends its next request when the last ends, until every measured one has ended."""
    pending = iter(plan.requests)
    taken = 0
    measured_left = plan.measured
    window_over = asyncio.Event()
    if measured_left == 0:
        window_over.set()

    async def stream() -> None:
        nonlocal measured_left
        nonlocal taken
        for req in pending:
            if req.phase == "cooldown" and window_over.is_set():
                return
            taken += 1
            # another request follows this stream's the moment it ends while the plan has any left
            await one(session, req, {}, more=taken < len(plan.requests))
            if req.phase == "measured":
                measured_left -= 1
                if measured_left == 0:
                    window_over.set()

    tasks = [asyncio.ensure_future(stream()) for _ in range(plan.concurrency or 1)]
    waiter = asyncio.ensure_future(window_over.wait())
    await asyncio.wait([waiter, asyncio.gather(*tasks, return_exceptions=True)], return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:  # the measured window is over: cancel the cool-down requests still in flight
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    waiter.cancel()


async def _open_loop(plan: Plan, session: Any, one: Callable, time_scale: float, t_origin: float,
                     lateness: list[float]) -> None:
    """Send each request at its scheduled time (model seconds / time_scale after the start)."""
    limit = asyncio.Semaphore(plan.concurrency) if plan.concurrency else None
    tasks = []

    async def send(req: PlannedRequest, scheduled: float) -> None:
        ready = time.perf_counter()
        late = ready - scheduled
        lateness.append(max(0.0, late))
        try:
            await one(session, req, {"scheduled_s": round((scheduled - t_origin) * time_scale, 7),
                                     "send_lateness_wall_s": round(late, 7)})
        finally:
            if limit is not None:
                limit.release()

    for req in plan.requests:
        target = t_origin + (req.send_at_s or 0.0) / time_scale
        delay = target - time.perf_counter()
        if delay > SPIN_BEFORE_SEND_S:
            await asyncio.sleep(delay - SPIN_BEFORE_SEND_S)
        while time.perf_counter() < target:
            await asyncio.sleep(0)
        if limit is not None:
            await limit.acquire()
            target = max(target, time.perf_counter())  # waiting for a free slot is the design's, not lateness
        tasks.append(asyncio.ensure_future(send(req, target)))
    await asyncio.gather(*tasks, return_exceptions=True)


async def _open_connections(session: Any, base_url: str, headers: dict[str, str] | None, n: int) -> None:
    """Fill the keep-alive pool before the clock starts, so no measured send pays for a TCP connect."""
    async def ping() -> None:
        try:
            async with session.get(base_url + "/health", headers=headers) as resp:
                await resp.read()
        except Exception:  # the pool is an optimisation; the workload reports real failures
            pass

    await asyncio.gather(*(ping() for _ in range(max(1, n))))


def served_model(base_url: str, headers: dict[str, str] | None) -> str | None:
    """The first model an OpenAI-compatible server lists at /v1/models (None if it lists none)."""
    try:
        resp = requests.get(base_url + "/v1/models", headers=headers, timeout=10)
        data = resp.json().get("data") or []
        return str(data[0]["id"]) if resp.status_code == 200 and data else None
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None


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
    protocol: str = "sglang",
    endpoint: Endpoint | None = None,
    model: str | None = None,
    base_dir: Path | None = None,
) -> dict[str, Any]:
    """Execute the launch's workload plan against a running server; returns what the record keeps.

    `protocol` is the backend's (`sglang`: `/generate` unless the workload names an endpoint;
    `openai`: `/v1/completions`); `endpoint` overrides both. `model` is the OpenAI `model` field
    (default: the first id the server lists). `on_row(index, unanalysed, row)` is called the
    moment a request ends (warm-up and cool-down rows have `unanalysed` true and their `phase`);
    the caller writes it at once. Returns the resolved workload (seed, schedule hash, dataset
    sha256 and rows) and the client's own timing health.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    ep: Endpoint = endpoint or endpoint_of(workload, protocol)
    if ep != "generate" and model is None:
        model = served_model(base_url, headers)
    plan = resolve_plan(workload, requests_n=requests_n, warmup=warmup, seed=seed, base_dir=base_dir)
    health = asyncio.run(_execute(plan, base_url, workload, ep, model, time_scale, headers, on_row))
    return {**plan.resolved, "endpoint": ep, "model": model, "client": health}


# --------------------------------------------------------------------------- the server's own view


def server_info(base_url: str, api_key: str | None, paths: tuple[str, ...] = ("/get_server_info", "/server_info")
                ) -> dict[str, Any] | None:
    """The server's description of itself from the first of the backend's info routes that answers JSON."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    for path in paths:
        try:
            resp = requests.get(base_url + path, timeout=5, headers=headers)
            if resp.status_code == 200:
                data = resp.json()
                return data if isinstance(data, dict) else {"response": data}
        except (requests.RequestException, ValueError):
            continue
    return None


def server_metrics(base_url: str, backend: BackendSettings) -> dict[str, float] | None:
    """The server's own Prometheus counters with its backend's prefix (None without a metrics route)."""
    from framework.execution import prometheus

    row = backend.table
    if not row.metrics_path or not row.metrics_prefix:
        return None
    headers = {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else None
    try:
        resp = requests.get(base_url + row.metrics_path, timeout=5, headers=headers)
    except requests.RequestException:
        return None
    if resp.status_code != 200:
        return None
    return prometheus.parse(resp.text, row.metrics_prefix) or None
