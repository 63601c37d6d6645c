"""Fault injection for the simulated server: the ways real servers fail, on demand and reproducibly.

A fault plan comes from ``--sim-fault-*`` flags or a YAML/JSON file (``--sim-fault-plan``; flags win
over the file). It lets the framework's tests and a user's own checks prove what happens when a
server crashes, hangs or lies: no orphan, a bounded time, the failure recorded, nothing lost from
the trials, and a verdict that claims no more than the data show.

Faults (all off by default):

- ``crash_at_start`` (exit code): the process exits during start-up, after logging why;
- ``crash_after_requests`` N: serves N generation requests, then the process dies abruptly
  (``os._exit``) as request N+1 arrives;
- ``hang_before_ready``: the port is bound but ``/health`` never answers 200;
- ``slow_start_s`` S: start-up takes S more wall seconds;
- ``hang_mid_stream`` K: a stream sends K events, then nothing (the connection stays open);
- ``cut_stream`` K: a stream sends K events, then the connection is dropped without an end;
- ``malformed_sse`` K: event K of a stream is not JSON;
- ``merge_chunks``: a stream's events are held back and sent at its end as one event carrying every
  token (as a real server whose engine outran its HTTP layer sends them: vLLM merges its outputs
  into one delta), so the client sees the whole answer in a single chunk;
- ``http_500``: generation requests are answered ``500`` with SGLang's error envelope;
- ``health_lies``: ``/health`` answers 200 from the start although the engine never becomes
  ready (every generation request is refused with 503).

``rate`` (default 1) is the share of generation requests the request faults hit, drawn from a
generator seeded by ``--random-seed``, so a launch's faults are reproducible.

The hooks are deliberately small: :func:`plan_from_values` (argument parsing), :func:`crash_at_start`
and :func:`before_ready` (the start-up sequence) and :func:`wrap` (an ASGI middleware around the
app), so the server and engine stay free of fault logic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger("framework.servers.sim.faults")

GENERATION_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
HEALTH_PATHS = ("/health", "/health_generate")
MARK = "fault injected"  # every log line and error body a fault produces carries it


class FaultPlan(BaseModel):
    """What goes wrong, and when (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    crash_at_start: int | None = Field(None, ge=1, le=255)
    crash_after_requests: int | None = Field(None, ge=0)
    hang_before_ready: bool = False
    slow_start_s: float | None = Field(None, ge=0)
    hang_mid_stream: int | None = Field(None, ge=0)
    cut_stream: int | None = Field(None, ge=0)
    malformed_sse: int | None = Field(None, ge=0)
    merge_chunks: bool = False
    http_500: bool = False
    health_lies: bool = False
    rate: float = Field(1.0, ge=0, le=1)

    @property
    def active(self) -> bool:
        return self != FaultPlan(rate=self.rate)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.model_dump(exclude_defaults=True).items()) or "none"


FLAGS: dict[str, dict[str, Any]] = {
    "crash_at_start": {"type": int, "nargs": "?", "const": 1, "metavar": "CODE",
                       "help": "exit with CODE (default 1) during start-up"},
    "crash_after_requests": {"type": int, "metavar": "N", "help": "die abruptly when generation request N+1 arrives"},
    "hang_before_ready": {"action": "store_const", "const": True, "help": "never answer /health with 200"},
    "slow_start_s": {"type": float, "metavar": "S", "help": "start-up takes S more wall seconds"},
    "hang_mid_stream": {"type": int, "metavar": "K", "help": "streams stall after K events"},
    "cut_stream": {"type": int, "metavar": "K", "help": "streams are dropped after K events"},
    "malformed_sse": {"type": int, "metavar": "K", "help": "event K of a stream is not JSON"},
    "merge_chunks": {"action": "store_const", "const": True,
                     "help": "send each stream as one event at its end (every token in one chunk)"},
    "http_500": {"action": "store_const", "const": True, "help": "answer generation requests with HTTP 500"},
    "health_lies": {"action": "store_const", "const": True,
                    "help": "/health answers 200 although the engine never becomes ready"},
    "rate": {"type": float, "metavar": "P", "help": "share of generation requests the request faults hit (1)"},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--sim-fault-*`` flags (dest ``sim_fault_<name>``) and ``--sim-fault-plan FILE``."""
    group = parser.add_argument_group("simulator faults (framework.servers.sim.faults)")
    group.add_argument("--sim-fault-plan", dest="sim_fault_plan", metavar="FILE",
                       help="a YAML or JSON mapping of the fault settings below")
    for name, kwargs in FLAGS.items():
        group.add_argument("--sim-fault-" + name.replace("_", "-"), dest="sim_fault_" + name, **kwargs)


def plan_from_values(values: dict[str, Any]) -> FaultPlan | None:
    """Pop the fault options out of parsed argument values; the plan, or None when no fault is set.

    Raises ValueError with a one-line reason for an unreadable file or a bad setting.
    """
    path = values.pop("sim_fault_plan", None)
    flags = {k.removeprefix("sim_fault_"): values.pop(k) for k in list(values) if k.startswith("sim_fault_")}
    data: dict[str, Any] = {}
    if path:
        import yaml  # only when a plan file is given

        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"--sim-fault-plan {path}: {exc}".splitlines()[0]) from exc
        if not isinstance(loaded, dict):
            raise ValueError(f"--sim-fault-plan {path}: expected a mapping of fault settings")
        data.update(loaded)
    data.update({k: v for k, v in flags.items() if v is not None})
    if not data:
        return None
    try:
        return FaultPlan(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"sim fault {field}: {err['msg']}") from exc


# --------------------------------------------------------------------------- start-up


def crash_at_start(plan: FaultPlan | None) -> None:
    """Log the plan (so the server log shows what was injected); exit now with its code if it asks to."""
    if plan is not None:
        log.warning(f"{MARK}: plan {plan.describe()}")
    if plan is not None and plan.crash_at_start is not None:
        log.error(f"{MARK}: crash at start (exit code {plan.crash_at_start})")
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(plan.crash_at_start)


async def before_ready(plan: FaultPlan | None) -> None:
    """Delay (slow start) or never return (hang before ready, lying health) before the server is ready."""
    if plan is None:
        return
    if plan.slow_start_s:
        log.warning(f"{MARK}: slow start, {plan.slow_start_s:g} s more")
        await asyncio.sleep(plan.slow_start_s)
    if plan.hang_before_ready or plan.health_lies:
        log.warning(f"{MARK}: {'health lies, ' if plan.health_lies else ''}never ready")
        await asyncio.Event().wait()  # until the process is stopped


# --------------------------------------------------------------------------- requests

Send = Callable[[dict[str, Any]], Awaitable[None]]


class _StreamCut(OSError):
    """Raised from the app's send, as a lost client is: the stream ends there (the engine drops the
    request) and the response is never finished, so the HTTP server drops the connection."""


def wrap(app: Any, plan: FaultPlan | None, seed: int) -> Any:
    """The app behind an ASGI middleware that injects the plan's request faults (the app itself if none)."""
    if plan is None or not plan.active:
        return app
    return _FaultMiddleware(app, plan, seed)


class _FaultMiddleware:
    def __init__(self, app: Any, plan: FaultPlan, seed: int) -> None:
        self.app, self.plan = app, plan
        self.rng = random.Random(seed)
        self.served = 0

    async def __call__(self, scope: dict, receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, plan = scope["path"], self.plan
        if plan.health_lies and path in HEALTH_PATHS:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if path not in GENERATION_PATHS or scope.get("method") not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        self.served += 1
        if plan.crash_after_requests is not None and self.served > plan.crash_after_requests:
            log.error(f"{MARK}: crash after {plan.crash_after_requests} requests")
            logging.shutdown()
            sys.stdout.flush()
            os._exit(1)
        if self.rng.random() >= plan.rate:
            await self.app(scope, receive, send)
            return
        if plan.http_500:
            body = json.dumps({"error": {"message": f"{MARK}: HTTP 500"}}).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, self._stream_faults(send))

    def _stream_faults(self, send: Send) -> Send:
        plan, events, sse = self.plan, 0, False
        held: list[bytes] = []

        async def faulty(message: dict[str, Any]) -> None:
            nonlocal events, sse
            if message["type"] == "http.response.start":
                sse = any(k.lower() == b"content-type" and b"event-stream" in v for k, v in message.get("headers", []))
            if plan.merge_chunks and sse and message["type"] == "http.response.body":
                held.append(message.get("body") or b"")
                if message.get("more_body", False):
                    return
                log.warning(f"{MARK}: stream merged into one chunk")
                await send({"type": "http.response.body", "body": merge_events(b"".join(held)), "more_body": False})
                return
            if message["type"] != "http.response.body" or not message.get("body"):
                await send(message)
                return
            # count server-sent events, not body messages: a loaded server may write several events at once
            out: list[bytes] = []
            for event in split_events(message["body"]):
                if plan.hang_mid_stream is not None and events >= plan.hang_mid_stream:
                    await _send_some(send, message, out)
                    log.warning(f"{MARK}: stream stalls after {plan.hang_mid_stream} events")
                    await asyncio.Event().wait()  # until the client gives up or the process is stopped
                if plan.cut_stream is not None and events >= plan.cut_stream:
                    await _send_some(send, message, out)
                    log.warning(f"{MARK}: stream cut after {plan.cut_stream} events")
                    raise _StreamCut()
                if plan.malformed_sse is not None and events == plan.malformed_sse:
                    log.warning(f"{MARK}: malformed event {plan.malformed_sse}")
                    event = b'data: {"text": "' + MARK.encode() + b'", meta_info: }\n\n'
                events += 1
                out.append(event)
            await send({**message, "body": b"".join(out)})

        return faulty


def split_events(body: bytes) -> list[bytes]:
    """A body's server-sent events, each with its blank-line end (a trailing partial event as it is)."""
    parts = body.split(b"\n\n")
    events = [part + b"\n\n" for part in parts[:-1]]
    return events + ([parts[-1]] if parts[-1] else [])


async def _send_some(send: Send, message: dict[str, Any], events: list[bytes]) -> None:
    """The events of a body that go out before a fault stops the stream."""
    if events:
        await send({**message, "body": b"".join(events), "more_body": True})


def merge_events(data: bytes) -> bytes:
    """A stream's server-sent events as one event carrying all of their tokens, then the rest (usage, [DONE]).

    `/generate` events are cumulative, so the last one stands for all (its `output_ids` joined when
    they came incrementally); an OpenAI stream's text deltas are joined into its last content chunk,
    which keeps that chunk's `usage` (the count so far) and the simulator's timestamp.
    """
    payloads: list[dict[str, Any]] = []
    rest: list[bytes] = []
    for event in data.split(b"\n\n"):
        text = event.strip().removeprefix(b"data:").strip()
        if not text:
            continue
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if isinstance(body, dict) and ("meta_info" in body or body.get("choices")):
            payloads.append(body)
        else:
            rest.append(text)
    if not payloads:
        return data
    merged = dict(payloads[-1])
    if "meta_info" in merged:
        ids = [i for p in payloads for i in p.get("output_ids") or []]
        if len(merged.get("output_ids") or []) != merged["meta_info"].get("completion_tokens"):
            merged["output_ids"] = ids
    else:
        choice = dict(merged["choices"][0])
        if "delta" in choice:
            role = next((p["choices"][0]["delta"].get("role") for p in payloads
                         if p["choices"][0].get("delta", {}).get("role")), None)
            content = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads)
            choice["delta"] = {**({"role": role} if role else {}), "content": content}
        else:
            choice["text"] = "".join(p["choices"][0].get("text") or "" for p in payloads)
        merged["choices"] = [choice]
    return b"".join(b"data: " + e + b"\n\n" for e in [json.dumps(merged).encode(), *rest])
