"""The known-schedule server: a minimal HTTP/1.1 layer on asyncio protocols and one timer for every stream.

Why not aiohttp or uvicorn: their per-event cost (a coroutine step, a framework response object) caps
one core at a few tens of thousands of events per second, below the loads the client must be measured
at. Here a request is parsed from the raw bytes, its events are pre-rendered templates, and one
timer heap drives every stream: each tick writes every token that is due (a stream whose tokens fell
due together gets them in one write, each still its own SSE event), stamping each write with
``time.monotonic()`` just before it. Token ``i`` (0-based) of a request received at ``t`` is due at
``t + first_token + i * interval`` (absolute deadlines: a late tick does not shift the rest).

Routes: ``POST /v1/completions`` and ``/v1/chat/completions`` (``stream: true``: SSE in chunked
transfer encoding; otherwise one JSON body at the end of the schedule), ``GET /health``,
``/v1/models`` and ``/version``. Responses keep the connection alive (HTTP/1.1).

The truth log has one JSON line per finished request: ``seq`` (the plan index from the framework's
``X-Sim-Loop`` header, else the server's own count), ``loop`` (that header's value), ``received``
(monotonic seconds when the request's body was complete), ``tokens`` and ``writes`` (each token's
write time, monotonic seconds), plus ``cancelled`` when the client went away first.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import signal
import sys
import time
from typing import IO, Any

_ENDPOINTS = {b"/v1/completions": "completions", b"/v1/chat/completions": "chat"}
_SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n")


def _response(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Schedule:
    """The server's settings and its one timer heap over every stream in flight."""

    def __init__(self, *, first_token_s: float, interval_s: float, tokens: int | None, model: str,
                 log: IO[str] | None) -> None:
        self.first_token_s, self.interval_s, self.tokens, self.model, self.log = (
            first_token_s, interval_s, tokens, model, log)
        self.heap: list[tuple[float, int, Stream]] = []
        self.counter = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = float("inf")
        self.loop = asyncio.get_running_loop()

    def add(self, stream: Stream) -> None:
        heapq.heappush(self.heap, (stream.due, next(self.counter), stream))
        self._arm()

    def _arm(self) -> None:
        if not self.heap:
            return
        due = self.heap[0][0]
        if due < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = due
            self.timer = self.loop.call_at(due, self._tick)

    def _tick(self) -> None:
        self.timer, self.timer_at = None, float("inf")
        heap = self.heap
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, stream = heapq.heappop(heap)
            if stream.emit(now):
                heapq.heappush(heap, (stream.due, next(self.counter), stream))
            now = time.monotonic()
        self._arm()

    def record(self, line: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.write(json.dumps(line, separators=(",", ":")) + "\n")
            self.log.flush()


class Stream:
    """One request's schedule: its pre-rendered events, the next token's deadline, its write times."""

    def __init__(self, sched: Schedule, conn: Connection, *, endpoint: str, n: int, prompt_tokens: int,
                 rid: int, seq: int, loop_tag: str | None, received: float, stream: bool, usage_each: bool,
                 include_usage: bool) -> None:
        self.sched, self.conn, self.n, self.seq, self.loop_tag, self.received = (
            sched, conn, n, seq, loop_tag, received)
        self.stream, self.usage_each, self.include_usage = stream, usage_each, include_usage
        self.endpoint, self.prompt_tokens, self.rid = endpoint, prompt_tokens, rid
        self.i = 0
        self.start = received + sched.first_token_s
        self.due = self.start
        self.writes: list[float] = []
        created = int(time.time())
        ident = f"cmpl-{rid}" if endpoint == "completions" else f"chatcmpl-{rid}"
        obj = "text_completion" if endpoint == "completions" else "chat.completion.chunk"
        head = (f'data: {{"id":"{ident}","object":"{obj}","created":{created},"model":"{sched.model}",'
                f'"choices":[{{"index":0,')
        body = '"text":" t","logprobs":null' if endpoint == "completions" else '"delta":{"content":" t"}'
        self._pre = (head + body + ',"finish_reason":').encode()
        self._usage_head = (head.replace('"choices":[{"index":0,', '"choices":[],') + '"usage":').encode()

    def _usage(self, k: int) -> bytes:
        p = self.prompt_tokens
        return b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (p, k, p + k)

    def _event(self, k: int) -> bytes:
        """The SSE event carrying token k (1-based count after it)."""
        finish = b'"length"' if k == self.n else b"null"
        tail = b',"usage":' + self._usage(k) if self.usage_each else b""
        return self._pre + finish + b"}]" + tail + b"}\n\n"

    def emit(self, now: float) -> bool:
        """Write every token due by `now`; True while tokens are left."""
        if self.conn.closed:
            self.finish(cancelled=True)
            return False
        first = self.i
        while self.i < self.n and self.start + self.i * self.sched.interval_s <= now:
            self.i += 1
        if self.stream:
            payload = b"".join(self._event(k) for k in range(first + 1, self.i + 1))
            if self.i == self.n:
                if self.include_usage:
                    payload += self._usage_head + self._usage(self.n) + b"}\n\n"
                payload += b"data: [DONE]\n\n"
            t = time.monotonic()
            self.conn.write(_chunk(payload) + (b"0\r\n\r\n" if self.i == self.n else b""))
        else:
            t = time.monotonic()
            if self.i == self.n:
                self.conn.write(_response("200 OK", self._whole()))
        self.writes.extend([t] * (self.i - first))
        if self.i == self.n:
            self.finish(cancelled=False)
            return False
        self.due = self.start + self.i * self.sched.interval_s
        return True

    def _whole(self) -> bytes:
        text = " t" * self.n
        choice: dict[str, Any] = ({"index": 0, "text": text, "finish_reason": "length"}
                                  if self.endpoint == "completions" else
                                  {"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "length"})
        return json.dumps({"id": f"cmpl-{self.rid}", "object": "text_completion", "model": self.sched.model,
                           "choices": [choice], "usage": {"prompt_tokens": self.prompt_tokens,
                                                          "completion_tokens": self.n,
                                                          "total_tokens": self.prompt_tokens + self.n}}).encode()

    def finish(self, *, cancelled: bool) -> None:
        line: dict[str, Any] = {"seq": self.seq, "loop": self.loop_tag, "endpoint": self.endpoint,
                                "received": self.received, "tokens": len(self.writes), "writes": self.writes}
        if cancelled:
            line["cancelled"] = True
        self.sched.record(line)
        self.conn.busy = False
        self.conn.next_request()


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: parses requests from the raw bytes, one at a time."""

    ids = itertools.count()

    def __init__(self, sched: Schedule) -> None:
        self.sched = sched
        self.buf = b""
        self.busy = False
        self.closed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.next_request()

    def next_request(self) -> None:
        if self.busy or self.closed:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].split(b"\r\n")
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get(b"content-length", b"0") or 0)
        if len(self.buf) < end + 4 + length:
            return
        body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
        received = time.monotonic()
        try:
            method, path, _ = head[0].split(b" ", 2)
        except ValueError:
            self.write(_response("400 Bad Request", b'{"error":"bad request line"}'))
            return
        path = path.split(b"?", 1)[0]
        self.busy = True
        if method == b"POST" and path in _ENDPOINTS:
            self._start(_ENDPOINTS[path], body, headers, received)
            return
        self.busy = False
        if method == b"GET" and path == b"/health":
            self.write(_response("200 OK", b"{}"))
        elif method == b"GET" and path == b"/v1/models":
            self.write(_response("200 OK", json.dumps({"object": "list", "data": [
                {"id": self.sched.model, "object": "model", "owned_by": "schedule"}]}).encode()))
        elif method == b"GET" and path == b"/version":
            self.write(_response("200 OK", b'{"version":"schedule"}'))
        else:
            self.write(_response("404 Not Found", b'{"error":"not found"}'))
        self.next_request()

    def _start(self, endpoint: str, body: bytes, headers: dict[bytes, bytes], received: float) -> None:
        try:
            req = json.loads(body or b"{}")
            if not isinstance(req, dict):
                raise ValueError("the body is not a JSON object")
            max_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 256)
        except (ValueError, TypeError) as exc:
            self.busy = False
            self.write(_response("400 Bad Request", json.dumps({"error": {"message": str(exc)}}).encode()))
            self.next_request()
            return
        n = self.sched.tokens or max_tokens
        prompt = req.get("prompt") if endpoint == "completions" else req.get("messages")
        prompt_tokens = len(prompt) if isinstance(prompt, list) and endpoint == "completions" else len(str(prompt)) // 4
        rid = next(self.ids)
        tag = headers.get(b"x-sim-loop")
        loop_tag = tag.decode("latin-1") if tag else None
        seq = rid
        if loop_tag:
            for part in loop_tag.split(";"):
                if part.startswith("seq="):
                    seq = int(part[4:])
        opts = req.get("stream_options") or {}
        stream = bool(req.get("stream"))
        if stream:
            self.write(_SSE_HEAD)
        self.sched.add(Stream(self.sched, self, endpoint=endpoint, n=n, prompt_tokens=prompt_tokens, rid=rid,
                              seq=seq, loop_tag=loop_tag, received=received, stream=stream,
                              usage_each=bool(opts.get("continuous_usage_stats")),
                              include_usage=bool(opts.get("include_usage"))))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m framework.servers.schedule", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="schedule", help="the model id /v1/models lists (default: schedule)")
    p.add_argument("--first-token-ms", type=float, default=20.0, help="first token this long after the request")
    p.add_argument("--interval-ms", type=float, default=2.0, help="then one token every this many ms")
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens per request (default: the request's max_tokens, else 256)")
    p.add_argument("--truth-log", default=None, help="append one JSON line per request with every token's write time")
    p.add_argument("--seed", default=None, help="accepted and ignored (the schedule is deterministic)")
    return p


async def serve(args: argparse.Namespace) -> None:
    log = open(args.truth_log, "a", encoding="utf-8") if args.truth_log else None  # noqa: SIM115
    sched = Schedule(first_token_s=args.first_token_ms / 1e3, interval_s=args.interval_ms / 1e3,
                     tokens=args.tokens, model=args.model, log=log)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(sched), args.host, args.port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"schedule server on http://{args.host}:{args.port}: first token {args.first_token_ms:g} ms, "
          f"then every {args.interval_ms:g} ms, {args.tokens or 'max_tokens'} tokens per request"
          f"{'' if _uvloop() is None else ' (uvloop)'}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        if log is not None:
            log.close()


def _uvloop() -> Any:
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return None
    return uvloop


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.interval_ms < 0 or args.first_token_ms < 0 or (args.tokens is not None and args.tokens < 1):
        print("error: --first-token-ms and --interval-ms must be >= 0 and --tokens >= 1", file=sys.stderr)
        return 2
    uv = _uvloop()
    if uv is not None:
        uv.install()
    asyncio.run(serve(args))
    return 0
