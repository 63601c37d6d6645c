"""The simulated server's HTTP face: SGLang's endpoints and shapes (Starlette), fed by the engine thread.

Shapes follow SGLang's ``entrypoints/http_server.py`` and ``managers/io_struct.py``: native
``/generate`` with SSE ``data: {json}`` events (cumulative ``text``, ``meta_info``) and
``data: [DONE]``, the OpenAI-compatible ``/v1`` routes, ``/metrics`` with ``sglang:`` names, and
SGLang's error envelopes (request-validation errors: a flat ``ErrorResponse`` with code 400;
semantic errors on ``/generate``: ``{"error": {"message": ...}}`` with 400).

Plain Starlette rather than FastAPI (which real SGLang uses) because FastAPI's import dominates the
sim's start-up and the sim launches once per experiment launch; the responses FastAPI would add
(``{"detail": ...}`` for 404/405, no implicit HEAD) are reproduced here. The request-body models are
built lazily (:func:`build_request_models`, called during the simulated start-up) and
``prometheus_client`` is imported only with ``--enable-metrics``.

The HTTP layer is shared by the servers the project ships: it drives any engine that satisfies
:class:`ServingEngine` (the sim's model clock here, the torch decoder of ``framework.servers.gpu``), so both
answer the same API with the same metrics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from framework.servers.api import tokens as model
from framework.servers.api.args import resolved_server_args
from framework.servers.api.request import Chunk, LoopTag, SimRequest, parse_loop_tag

log = logging.getLogger("framework.servers.api.server")

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
OPENAI_DEFAULT_MAX_TOKENS = 16  # OpenAI completions default


# --------------------------------------------------------------------------- request bodies


class _Loose(BaseModel):
    # defer_build: the validators are built by build_request_models() during the simulated start-up
    # (or on first use), not at import, which keeps process start-up short.
    model_config = ConfigDict(extra="allow", defer_build=True)


class SamplingParams(_Loose):
    max_new_tokens: int | None = Field(None, ge=0)
    temperature: float = Field(1.0, ge=0)
    ignore_eos: bool = False
    stop: str | list[str] | None = None


class GenerateReqInput(_Loose):
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: SamplingParams | list[SamplingParams] | None = None
    stream: bool = False
    rid: str | list[str] | None = None


class StreamOptions(_Loose):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # SGLang and vLLM: usage on every chunk (its count so far)


class _OpenAIRequest(_Loose):
    """The fields /v1/completions and /v1/chat/completions share."""

    model: str | None = None
    temperature: float | None = Field(None, ge=0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    n: int = Field(1, ge=1, le=1)


class CompletionRequest(_OpenAIRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(OPENAI_DEFAULT_MAX_TOKENS, ge=0)


class ChatMessage(_Loose):
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_OpenAIRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)


REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    SamplingParams, GenerateReqInput, StreamOptions, _OpenAIRequest, CompletionRequest, ChatMessage,
    ChatCompletionRequest)


def build_request_models() -> None:
    """Build the deferred request-body validators now, so no request pays for it (idempotent)."""
    for kind in REQUEST_MODELS:
        if not kind.__pydantic_complete__:
            kind.model_rebuild(force=True)


def _stops(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]


def _bad_request(message: str) -> JSONResponse:
    """SGLang's request-validation envelope (``ErrorResponse``), status 400."""
    return JSONResponse(status_code=400, content={
        "object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400})


def _starting() -> JSONResponse:
    """What a request gets before the server is ready (real SGLang does not answer before it has loaded)."""
    return JSONResponse(status_code=503, content={"error": {"message": "server is starting"}})


def _generate_error(message: str) -> JSONResponse:
    """SGLang's ``_create_error_response`` for /generate: ``{"error": {"message": ...}}``, 400."""
    return JSONResponse(status_code=400, content={"error": {"message": message}})


class _BodyError(Exception):
    def __init__(self, response: JSONResponse) -> None:
        self.response = response


async def _parse(request: Request, kind: type[BaseModel]) -> Any:
    try:
        raw = await request.body()
        data = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BodyError(_bad_request(f"JSON decode error: {exc}")) from exc
    if not isinstance(data, dict):
        raise _BodyError(_bad_request("request body must be a JSON object"))
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        errs = [{"loc": e["loc"], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise _BodyError(_bad_request(f"{len(errs)} validation error(s): {errs}")) from exc


# --------------------------------------------------------------------------- state


# SGLang 0.5.9's histogram buckets (tests/fixtures/sglang_0_5_9/metrics.txt)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS = (*TTFT_BUCKETS, 600.0, 1200.0, 1800.0, 2400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4,
               0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
# the scheduler's gauges carry these beside model_name in SGLang 0.5.9 (one scheduler: TP rank 0's)
SCHEDULER_LABELS = {"engine_type": "unified", "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}


@dataclass
class Metrics:
    """Prometheus collectors with SGLang 0.5.9's ``sglang:`` names, labels and buckets, for the families the
    servers we ship can fill (times on the model clock); tests/servers/sim/test_sglang_shapes.py holds them to
    the recorded ``metrics.txt``."""

    labels: dict[str, str]
    registry: Any = None  # a prometheus_client CollectorRegistry (created here when not given)

    def __post_init__(self) -> None:
        # Imported here: prometheus_client is only needed with --enable-metrics.
        import prometheus_client
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        disable = getattr(prometheus_client, "disable_created_metrics", None)  # prometheus_client >= 0.17
        if disable is not None:
            disable()  # SGLang's /metrics has no `_created` series
        if self.registry is None:
            self.registry = CollectorRegistry()
        names = list(self.labels)
        self.scheduler_labels = dict(sorted({**self.labels, **SCHEDULER_LABELS}.items()))
        sched = list(self.scheduler_labels)
        r = self.registry
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", names, registry=r)
        self.generation_tokens = Counter("sglang:generation_tokens", "Number of generation tokens processed.", names,
                                         registry=r)
        self.num_requests = Counter("sglang:num_requests", "Number of requests processed.", names, registry=r)
        # no prefix cache in the sim (docs/model.md): the counter SGLang exports, at 0
        self.cached_tokens = Counter("sglang:cached_tokens", "Number of cached prompt tokens by source "
                                     "(device/host/storage).", ["cache_source", *names], registry=r)
        self.cached_tokens.labels(cache_source="total", **self.labels)
        self.num_running = Gauge("sglang:num_running_reqs", "The number of running requests.", sched, registry=r)
        self.num_queue = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched,
                               registry=r)
        self.gen_throughput = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", sched,
                                    registry=r)
        self.spec_accept = Gauge("sglang:spec_accept_length", "The average acceptance length of speculative "
                                 "decoding.", sched, registry=r)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              names, buckets=TTFT_BUCKETS, registry=r)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in "
                             "seconds", names, buckets=E2E_BUCKETS, registry=r)
        self.itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             names, buckets=ITL_BUCKETS, registry=r)


class ServingEngine(Protocol):
    """What the HTTP layer needs from an engine: thread-safe submit/abort of :class:`SimRequest`s whose
    chunks arrive on ``req.queue``, a wall clock, and the figures ``/get_server_info`` and ``/metrics`` show.
    ``spec`` is None without speculative decoding, else has ``num_steps``, ``topk``, ``num_draft_tokens``."""

    spec: Any
    num_running: int
    num_waiting: int
    last_gen_throughput: float

    @property
    def avg_spec_accept_length(self) -> float: ...

    def wall(self, perf: float | None = None) -> float: ...

    def submit(self, req: SimRequest) -> None: ...

    def abort(self, req: SimRequest) -> None: ...


@dataclass
class ServerState:
    args: Any  # SGLang-style ServerArgs (a pydantic model): model_path, tokenizer_path, api_key, ...
    engine: ServingEngine
    seed: int
    backend_info: dict[str, Any] = field(default_factory=dict)  # the backend's own /get_server_info fields
    ground_truth: TextIO | None = None
    ready: bool = False
    metrics: Metrics | None = None
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def model_name(self) -> str:
        return self.args.served_model_name or self.args.model_path


# --------------------------------------------------------------------------- request driving


def _new_request(state: ServerState, prompt: str | list[int], prompt_tokens: int, max_new: int,
                 stop: list[str], rid: str | None, ignore_eos: bool = False, temperature: float = 0.0) -> SimRequest:
    return SimRequest(
        rid=rid or uuid.uuid4().hex, prompt_tokens=prompt_tokens, max_new_tokens=max_new, stop=stop,
        seed=model.prompt_seed(prompt), queue=asyncio.Queue(), loop=asyncio.get_running_loop(),
        prompt_ids=list(prompt) if isinstance(prompt, list) else None, ignore_eos=ignore_eos,
        prompt_text=prompt if isinstance(prompt, str) else None,
        temperature=temperature,
    )


def context_length(state: ServerState) -> int:
    """``--context-length``, else the model's (the profile's; 163,840 for DeepSeek-V3)."""
    given = getattr(state.args, "context_length", None)
    if given:
        return int(given)
    return int(state.backend_info.get("sim_context_length") or 163840)


def check_length(state: ServerState, prompt_tokens: int, max_new: int | None) -> str | None:
    """SGLang's ``_validate_one_request``: its message when the request does not fit the context, else None."""
    ctx = context_length(state)
    if prompt_tokens >= ctx:
        return f"The input ({prompt_tokens} tokens) is longer than the model's context length ({ctx} tokens)."
    if max_new is not None and max_new + prompt_tokens >= ctx:
        return (f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested "
                f"a total of {max_new + prompt_tokens} tokens: {prompt_tokens} tokens from the input messages and "
                f"{max_new} tokens for the completion. Please reduce the number of tokens in the input messages or "
                "the completion to fit within the limit.")
    return None


def _watch_disconnect(request: Request, reqs: list[SimRequest], state: ServerState) -> asyncio.Task:
    """A non-streaming request whose client went away stops in the engine (SGLang aborts it too)."""

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                for r in reqs:
                    if not r.finished:
                        state.engine.abort(r)
                        r.queue.put_nowait(None)
                return

    return asyncio.ensure_future(watch())


async def _chunk_batches(state: ServerState, req: SimRequest, endpoint: str) -> AsyncIterator[list[Chunk]]:
    """Submit ``req`` and yield its chunks, all that are ready at once (a lagging loop catches up in
    one socket write instead of falling further behind). A disconnect ends the request in the engine."""
    state.engine.submit(req)
    m = state.metrics
    if m is not None:
        m.prompt_tokens.labels(**m.labels).inc(req.prompt_tokens)
    last_e2e = 0.0
    try:
        while True:
            batch: list[Chunk] = []
            item = await req.queue.get()
            while True:
                if item is None:  # client went away
                    return
                batch.append(item)
                if item.finished or req.queue.empty():
                    break
                item = req.queue.get_nowait()
            for chunk in batch:
                if m is not None:
                    m.generation_tokens.labels(**m.labels).inc(chunk.new_tokens)
                    if chunk.index == 0:
                        m.ttft.labels(**m.labels).observe(chunk.e2e_latency)
                    elif chunk.new_tokens:
                        # SGLang's observe_inter_token_latency: the interval counts once per token
                        # (count += tokens, sum += interval), not once per chunk
                        per_token = (chunk.e2e_latency - last_e2e) / chunk.new_tokens
                        hist = m.itl.labels(**m.labels)
                        for _ in range(chunk.new_tokens):
                            hist.observe(per_token)
                    if chunk.finished:
                        m.e2e.labels(**m.labels).observe(chunk.e2e_latency)
                        m.num_requests.labels(**m.labels).inc()
                last_e2e = chunk.e2e_latency
                lag = state.engine.wall() - chunk.t_due_wall
                req.max_lag_s = max(req.max_lag_s, lag)
                if chunk.index == 0:
                    req.first_lag_s = lag
                if chunk.finished:
                    req.last_lag_s = lag
                _record_ground_truth(state, req, chunk, endpoint)
            yield batch
            if batch[-1].finished:
                return
    finally:
        if not req.finished:
            state.engine.abort(req)


async def _final_chunk(state: ServerState, req: SimRequest, endpoint: str) -> Chunk | None:
    last: Chunk | None = None
    async for batch in _chunk_batches(state, req, endpoint):
        last = batch[-1]
    return last  # None: the client went away and the request was aborted


class SSEResponse(Response):
    """A bare ASGI server-sent-events response: one ``send`` per batch of events, no extra layers.

    Starlette's StreamingResponse adds a task group and wrappers per chunk; at high
    ``--sim-speedup`` that per-chunk cost shows up as timing error, so the hot path stays thin.
    A client disconnect puts ``None`` into the request's queue, which ends the stream.
    """

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], req: SimRequest) -> None:  # noqa: D107
        super().__init__(status_code=200, media_type=self.media_type)
        self.stream, self.req = body, req

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.req.aborted = True
            self.req.queue.put_nowait(None)

        watcher = asyncio.create_task(watch())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]})
            async for data in self.stream:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass
        finally:
            watcher.cancel()
            await self.stream.aclose()  # type: ignore[attr-defined]


def _record_ground_truth(state: ServerState, req: SimRequest, chunk: Chunk, endpoint: str) -> None:
    """One JSON line per chunk, stamped as the chunk is handed to the HTTP layer (docs/model.md)."""
    if state.ground_truth is None:
        return
    line = {
        "rid": req.rid, "chunk": chunk.index, "t_wall": state.engine.wall(), "t_due": chunk.t_due_wall,
        "model_t": chunk.e2e_latency, "tokens": chunk.new_tokens, "completion_tokens": chunk.completion_tokens,
        "finished": chunk.finished, "endpoint": endpoint, "sim_speedup": state.args.sim_speedup,
    }
    state.ground_truth.write(json.dumps(line) + "\n")
    if chunk.finished:
        state.ground_truth.flush()


def _meta(state: ServerState, req: SimRequest, chunk: Chunk) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid, "finish_reason": chunk.finish_reason, "prompt_tokens": req.prompt_tokens,
        "completion_tokens": chunk.completion_tokens, "cached_tokens": 0,
    }
    if req.prompt_ids is None:  # a text prompt: counted by the stand-in tokenizer (servers/api/tokens.py)
        meta["prompt_tokens_estimated"] = True
    if chunk.finished:  # SGLang sets e2e_latency when the request finishes, not on every event
        meta["e2e_latency"] = chunk.e2e_latency
    if state.engine.spec is not None:
        meta["spec_verify_ct"] = chunk.spec_verify_ct
        meta["spec_accept_length"] = (chunk.completion_tokens / chunk.spec_verify_ct
                                      if chunk.spec_verify_ct else 0.0)
        if getattr(state.engine.spec, "algorithm", None) == "NGRAM":  # drafts that are real: SGLang's counts
            meta["spec_draft_token_num"] = chunk.spec_draft_token_num
            meta["spec_accept_token_num"] = chunk.spec_accept_token_num
    if state.backend_info.get("backend") != "sim":
        return meta
    meta.update({
        "sim_speedup": state.args.sim_speedup,
        # the model clock: model seconds from the request's arrival at the engine to this event's step
        # (the client's figures on backend=sim; what HTTP and parsing add in wall time is left out)
        "sim_model_t": round(chunk.e2e_latency, 9),
        # the mean running batch of the decode steps so far (how full the model's batch really was)
        "sim_mean_batch": round(chunk.mean_batch, 4),
        # the request's arrival on the model clock: model s from its loop's start (X-Sim-Loop), else
        # since the engine started
        "sim_arrival_model_s": round(_arrival(req), 9),
        # how far behind its own clock the sim handed out this request's chunks (wall s): if this is
        # not small against the request's duration, the speed-up is more than the machine sustains
        "sim_max_lag_s": round(req.max_lag_s, 6),
        # the first and last chunk's lateness: the only ones the client's metrics depend on, since the
        # engine keeps absolute deadlines and a late chunk does not delay the next
        "sim_first_lag_s": round(req.first_lag_s, 6),
        "sim_last_lag_s": round(req.last_lag_s, 6),
    })
    return meta


def _arrival(req: SimRequest) -> float:
    loop_s = getattr(req, "loop_arrival_s", None)
    return float(loop_s if loop_s is not None else getattr(req, "arrival_model", 0.0))


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


# --------------------------------------------------------------------------- app


class ApiKeyMiddleware:
    """``Authorization: Bearer KEY`` on every route but health and metrics, as SGLang's middleware.

    A plain ASGI middleware (not Starlette's BaseHTTPMiddleware, which adds per-chunk latency
    to streaming responses and would distort the timings the client measures).
    """

    def __init__(self, app: Any, key: str, exempt: tuple[str, ...]) -> None:
        self.app, self.expected, self.exempt = app, f"Bearer {key}".encode(), exempt

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(self.exempt):
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"") != self.expected:
                await JSONResponse(status_code=401, content={"error": "Unauthorized"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _http_exception(_: Request, exc: Exception) -> Response:
    """FastAPI's handler for 404/405 and friends: ``{"detail": ...}`` as JSON (no body where none is allowed)."""
    assert isinstance(exc, HTTPException)
    if exc.status_code < 200 or exc.status_code in (204, 205, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def _route(path: str, endpoint: Any, methods: list[str]) -> Route:
    """A route answering exactly ``methods`` (FastAPI adds no implicit HEAD to GET routes; Starlette does)."""
    route = Route(path, endpoint, methods=methods)
    route.methods = {m.upper() for m in methods}
    return route


def create_app(state: ServerState) -> Starlette:
    health_paths = ("/health", "/health_generate", "/metrics")

    async def _body_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, _BodyError)
        return exc.response

    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        return JSONResponse(status_code=500, content={"error": {"message": f"internal error: {exc}"}})

    async def health(_: Request) -> Response:
        return Response(status_code=200 if state.ready else 503)

    async def server_info(_: Request) -> Response:
        return JSONResponse({**server_info_dict(state), "internal_states": [{
            "last_gen_throughput": state.engine.last_gen_throughput,
            "avg_spec_accept_length": state.engine.avg_spec_accept_length,
            **{k: getattr(state.engine, k) for k in ("spec_verify_ct", "spec_draft_token_num", "spec_accept_token_num")
               if hasattr(state.engine, k)},
        }]})

    async def model_info(_: Request) -> Response:
        return JSONResponse({"model_path": state.args.model_path,
                             "tokenizer_path": state.args.tokenizer_path or state.args.model_path,
                             "is_generation": True, "preferred_sampling_params": None, "weight_version": "default"})

    def model_card() -> dict[str, Any]:
        return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "sglang",
                "root": state.model_name, "parent": None, "max_model_len": context_length(state)}

    async def models(_: Request) -> Response:
        if not state.ready:
            return _starting()
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def model_by_id(request: Request) -> Response:
        if not state.ready:
            return _starting()
        name = request.path_params["model"]
        if name != state.model_name:
            return JSONResponse(status_code=404, content={"error": {
                "message": f"The model '{name}' does not exist", "type": "invalid_request_error",
                "param": "model", "code": "model_not_found"}})
        return JSONResponse({**model_card(), "id": name, "root": name})

    async def get_load(_: Request) -> Response:
        if not state.ready:
            return _starting()
        running, waiting = state.engine.num_running, state.engine.num_waiting
        return JSONResponse([{"dp_rank": 0, "num_reqs": running + waiting, "num_waiting_reqs": waiting,
                              "num_tokens": 0, "ts_tic": time.time()}])

    async def abort_request(request: Request) -> Response:
        try:
            data = json.loads(await request.body() or b"{}")
        except ValueError as exc:
            return _bad_request(f"JSON decode error: {exc}")
        if not isinstance(data, dict):
            return _bad_request("request body must be a JSON object")
        abort = getattr(state.engine, "abort_rid", None)
        if abort is not None:
            abort(str(data.get("rid") or ""), bool(data.get("abort_all")))
        return Response(status_code=200)

    async def start_profile(_: Request) -> Response:  # nothing to profile: SGLang's answer, no trace
        return PlainTextResponse("Start profiling.\n")

    async def stop_profile(_: Request) -> Response:
        return PlainTextResponse("Stop profiling. This will take some time.\n")

    async def ping(_: Request) -> Response:
        return Response(status_code=200)

    async def flush_cache(_: Request) -> Response:
        busy = state.engine.num_running > 0 or state.engine.num_waiting > 0
        return PlainTextResponse(
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
            "requests, the operation will not be performed.)\n", status_code=400 if busy else 200)

    async def metrics(_: Request) -> Response:
        m = state.metrics
        if m is None:
            return JSONResponse(status_code=404, content={"detail": "Not Found"})
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # imported with Metrics already

        sched = m.scheduler_labels
        m.num_running.labels(**sched).set(state.engine.num_running)
        m.num_queue.labels(**sched).set(state.engine.num_waiting)
        m.gen_throughput.labels(**sched).set(state.engine.last_gen_throughput)
        m.spec_accept.labels(**sched).set(state.engine.avg_spec_accept_length)
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    async def generate(request: Request) -> Response:
        obj: GenerateReqInput = await _parse(request, GenerateReqInput)
        try:
            items = _generate_items(obj)
        except ValueError as exc:
            return _generate_error(str(exc))
        if not state.ready:
            return _starting()
        problem = next((p for p in (check_length(state, it[1], it[2]) for it in items) if p), None)
        if problem is not None:  # SGLang: a stream gets the error as an event (status 200), else 400
            if obj.stream:
                return Response(_sse({"error": {"message": problem}}) + b"data: [DONE]\n\n",
                                media_type="text/event-stream")
            return _generate_error(problem)
        reqs = [_new_request(state, prompt, n_prompt, max_new, stop, rid, ignore_eos, temp)
                for prompt, n_prompt, max_new, stop, rid, ignore_eos, temp in items]
        _closed_loop(request, reqs)
        if obj.stream:
            req = reqs[0]

            incremental = bool((getattr(state.args, "server_args", None) or {}).get("stream_output"))

            async def stream() -> AsyncIterator[bytes]:
                sent = 0
                async for batch in _chunk_batches(state, req, "/generate"):
                    data = b""
                    for c in batch:  # output_ids as SGLang: cumulative, or only the new ones with --stream-output
                        ids = c.output_ids[sent:] if incremental else c.output_ids
                        sent = len(c.output_ids)
                        data += _sse({"text": c.text, "output_ids": ids, "meta_info": _meta(state, req, c),
                                      "index": 0})
                    yield data + b"data: [DONE]\n\n" if batch[-1].finished else data

            return SSEResponse(stream(), req)

        async def one(req: SimRequest) -> dict[str, Any] | None:
            last = await _final_chunk(state, req, "/generate")
            if last is None:
                return None
            return {"text": last.text, "output_ids": last.output_ids, "meta_info": _meta(state, req, last)}

        watcher = _watch_disconnect(request, reqs, state)
        try:
            results = await asyncio.gather(*(one(r) for r in reqs))
        finally:
            watcher.cancel()
        if any(r is None for r in results):  # the client is gone; nobody reads this
            return Response(status_code=499)
        return JSONResponse(results if isinstance(obj.text, list) or _is_batch_ids(obj.input_ids) else results[0])

    async def completions(request: Request) -> Response:
        obj: CompletionRequest = await _parse(request, CompletionRequest)
        prompt = obj.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                return _bad_request("the simulator serves one prompt per completion request")
            prompt = prompt[0]
        n_prompt = len(prompt) if isinstance(prompt, list) else model.count_text_tokens(prompt)
        max_new = obj.max_tokens if obj.max_tokens is not None else OPENAI_DEFAULT_MAX_TOKENS
        return await _openai(state, request, obj, prompt, n_prompt, max_new, chat=False)

    async def chat(request: Request) -> Response:
        obj: ChatCompletionRequest = await _parse(request, ChatCompletionRequest)
        text = "\n".join(_content_text(m.content) for m in obj.messages)
        n_prompt = model.count_text_tokens(text) + 4 * len(obj.messages)  # chat-template tokens
        max_new = obj.max_completion_tokens if obj.max_completion_tokens is not None else obj.max_tokens
        return await _openai(state, request, obj, text, n_prompt,
                             DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new, chat=True)

    routes = [
        _route("/health", health, ["GET"]),
        _route("/health_generate", health, ["GET"]),
        _route("/get_server_info", server_info, ["GET"]),
        _route("/server_info", server_info, ["GET"]),
        _route("/get_model_info", model_info, ["GET"]),
        _route("/v1/models", models, ["GET"]),
        _route("/v1/models/{model:path}", model_by_id, ["GET"]),
        _route("/get_load", get_load, ["GET"]),
        _route("/abort_request", abort_request, ["POST"]),
        _route("/start_profile", start_profile, ["GET", "POST"]),
        _route("/stop_profile", stop_profile, ["GET", "POST"]),
        _route("/ping", ping, ["GET"]),
        _route("/flush_cache", flush_cache, ["GET", "POST"]),
        _route("/metrics", metrics, ["GET"]),
        _route("/generate", generate, ["POST", "PUT"]),
        _route("/v1/completions", completions, ["POST"]),
        _route("/v1/chat/completions", chat, ["POST"]),
    ]
    middleware = ([Middleware(ApiKeyMiddleware, key=state.args.api_key, exempt=health_paths)]
                  if state.args.api_key else [])
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={
        HTTPException: _http_exception, _BodyError: _body_error, Exception: _internal})
    app.state.sim = state
    return app


CLOSED_LOOP_HEADER = "x-sim-closed-loop"
LOOP_HEADER = "x-sim-loop"


def _closed_loop(request: Request, reqs: list[SimRequest]) -> None:
    """The sim's extensions (other servers ignore them; docs/model.md, "Timing"): ``X-Sim-Closed-Loop: next``,
    the client sends its next request the moment this one ends, so the model clock waits for it instead of
    counting the client's wall time; ``X-Sim-Loop``, the request's place in its loop (:class:`LoopTag`)."""
    tag = parse_loop_tag(request.headers.get(LOOP_HEADER, ""))
    nxt = request.headers.get(CLOSED_LOOP_HEADER, "").strip().lower() == "next"
    if tag is None and nxt:  # a client that only announces its next request: one closed loop
        tag = LoopTag("")
    for r in reqs:
        r.closed_loop_next = nxt
        r.loop_tag = tag if len(reqs) == 1 else None


def _is_batch_ids(ids: Any) -> bool:
    return isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)


def _generate_items(obj: GenerateReqInput) -> list[tuple[Any, int, int, list[str], str | None, bool, float]]:
    """Normalize a /generate body into (prompt, prompt_tokens, max_new_tokens, stop, rid) per request."""
    if obj.text is None and obj.input_ids is None:
        raise ValueError("Either text, input_ids or input_embeds should be provided.")
    if obj.text is not None and obj.input_ids is not None:
        raise ValueError("Either text or input_ids should be provided, not both.")
    if obj.input_ids is not None:
        prompts: list[Any] = obj.input_ids if _is_batch_ids(obj.input_ids) else [obj.input_ids]
        counts = [len(p) for p in prompts]
    else:
        prompts = obj.text if isinstance(obj.text, list) else [obj.text]
        counts = [model.count_text_tokens(p) for p in prompts]
    if not prompts:
        raise ValueError("empty batch")
    if obj.stream and len(prompts) > 1:
        raise ValueError("the simulator does not stream batch requests; send one request per prompt")
    if any(c == 0 for c in counts):
        raise ValueError("The input_ids is empty.")
    sp = obj.sampling_params
    sps = sp if isinstance(sp, list) else [sp or SamplingParams()] * len(prompts)
    if len(sps) != len(prompts):
        raise ValueError("sampling_params must have one entry per prompt")
    rids = obj.rid if isinstance(obj.rid, list) else [obj.rid] * len(prompts)
    if len(prompts) > 1 and not isinstance(obj.rid, list):
        rids = [None] * len(prompts)
    return [(p, c, DEFAULT_MAX_NEW_TOKENS if s.max_new_tokens is None else s.max_new_tokens, _stops(s.stop), r,
             s.ignore_eos, s.temperature)
            for p, c, s, r in zip(prompts, counts, sps, rids, strict=False)]


def _content_text(content: str | list[dict[str, Any]] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def _openai_finish(chunk: Chunk) -> tuple[str | None, str | None]:
    fr = chunk.finish_reason
    if fr is None:
        return None, None
    return ("stop", fr.get("matched")) if fr.get("type") == "stop" else ("length", None)


async def _openai(state: ServerState, request: Request, obj: CompletionRequest | ChatCompletionRequest,
                  prompt: Any, n_prompt: int, max_new: int, *, chat: bool) -> Response:
    if not state.ready:
        return _starting()
    problem = check_length(state, n_prompt, max_new)
    if problem is not None:
        return _bad_request(problem)
    req = _new_request(state, prompt, n_prompt, max_new, _stops(obj.stop), None, obj.ignore_eos,
                       obj.temperature or 0.0)
    _closed_loop(request, [req])
    rid = ("chatcmpl-" if chat else "cmpl-") + req.rid
    created = int(time.time())
    endpoint = "/v1/chat/completions" if chat else "/v1/completions"

    # a text prompt's count is the stand-in tokenizer's (servers/api/tokens.py), not a real tokenizer's: said so
    estimated = {"prompt_tokens_estimated": True} if not isinstance(prompt, list) else {}

    def usage(c: Chunk) -> dict[str, Any]:
        return {"prompt_tokens": n_prompt, "completion_tokens": c.completion_tokens,
                "total_tokens": n_prompt + c.completion_tokens, **estimated}

    if obj.stream:
        include_usage = bool(obj.stream_options and obj.stream_options.include_usage)
        continuous = include_usage and bool(obj.stream_options and obj.stream_options.continuous_usage_stats)
        kind = "chat.completion.chunk" if chat else "text_completion"

        is_sim = state.backend_info.get("backend") == "sim"

        def event(choice: dict[str, Any], chunk: Chunk | None = None, tokens: int | None = None) -> bytes:
            body = {"id": rid, "object": kind, "created": created, "model": state.model_name,
                    "choices": [choice], "usage": None}
            if continuous and chunk is not None:  # the count so far, as SGLang's continuous_usage_stats
                n = chunk.completion_tokens if tokens is None else tokens
                body["usage"] = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n,
                                 **estimated}
            if is_sim and chunk is not None:  # the sim's model clock, as in /generate's meta_info (extra keys)
                body.update(sim_model_t=round(chunk.e2e_latency, 9), sim_mean_batch=round(chunk.mean_batch, 4),
                            sim_arrival_model_s=round(_arrival(req), 9))
            return _sse(body)

        async def stream() -> AsyncIterator[bytes]:
            sent, last = "", None
            async for batch in _chunk_batches(state, req, endpoint):
                data = b""
                for chunk in batch:
                    if chat and last is None:  # SGLang sends the role with the first output, after prefill
                        data += event({"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "logprobs": None, "finish_reason": None}, chunk, tokens=0)
                    last = chunk
                    grew = chunk.text.startswith(sent)
                    delta, sent = (chunk.text[len(sent):], chunk.text) if grew else ("", sent)
                    finish, matched = _openai_finish(chunk)
                    if chat and finish:  # SGLang 0.5.9: the last content, then the finish reason in a chunk of
                        # its own with no content (tests/fixtures/sglang_0_5_9/responses/chat_stream.json)
                        data += event({"index": 0, "delta": {"content": delta}, "logprobs": None,
                                       "finish_reason": None}, chunk)
                        data += event({"index": 0, "delta": {"content": None}, "logprobs": None,
                                       "finish_reason": finish, "matched_stop": matched}, chunk)
                        continue
                    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
                    choice.update({"delta": {"content": delta}} if chat else {"text": delta})
                    if finish:
                        choice["matched_stop"] = matched
                    data += event(choice, chunk)
                yield data
            if include_usage and last is not None:
                yield _sse({"id": rid, "object": kind, "created": created, "model": state.model_name,
                            "choices": [], "usage": usage(last)})
            yield b"data: [DONE]\n\n"

        return SSEResponse(stream(), req)

    watcher = _watch_disconnect(request, [req], state)
    try:
        last = await _final_chunk(state, req, endpoint)
    finally:
        watcher.cancel()
    if last is None:  # the client is gone
        return Response(status_code=499)
    finish, matched = _openai_finish(last)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": last.text},
                  "logprobs": None, "finish_reason": finish, "matched_stop": matched}
        body = {"id": rid, "object": "chat.completion", "created": created, "model": state.model_name,
                "choices": [choice], "usage": usage(last)}
    else:
        choice = {"index": 0, "text": last.text, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
        body = {"id": rid, "object": "text_completion", "created": created, "model": state.model_name,
                "choices": [choice], "usage": usage(last)}
    return JSONResponse(body)


def server_info_dict(state: ServerState) -> dict[str, Any]:
    """SGLang's ``/get_server_info``: the full resolved ServerArgs (SGLang's field names), then the
    backend's own fields (``backend_info``: which backend, the SGLang version it serves as, what it runs on)."""
    a = state.args
    if getattr(a, "server_args", None):
        info = resolved_server_args(a, state.seed)
    else:  # an engine whose args carry no resolved ServerArgs
        info = a.model_dump()
        info.update({"tokenizer_path": a.tokenizer_path or a.model_path, "served_model_name": state.model_name,
                     "random_seed": state.seed, "api_key": "***" if a.api_key else None})
    info.update(state.backend_info)
    return info
