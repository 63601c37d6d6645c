"""When a connection's bytes arrived: each socket read stamped in the protocol's ``data_received``.

aiohttp hands a connection's bytes to its protocol's ``data_received`` the moment the event loop reads
the socket, and wakes the reading coroutine only later (after every other ready callback); stamping there
keeps that wait, which grows with the load, out of the figures (request.measure_request reads the log).

The client's connectors (connection.connector, connection.fresh_session) watch every protocol from its
creation (`watch_connector`), so the bytes of a connection's first read are stamped too: on a client
that fell behind, a fresh connection's response headers and its whole stream can come in that one read
(issue 32's self-check then had no measured wait for it). A protocol made elsewhere is watched from
the first response read on it (`log_of`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Callable

from framework.execution.client import polls

Arrivals = deque  # of (perf_counter, the payload fed, its body bytes fed so far, the bytes' wait in s or None: polls)

_LOG_ATTR = "_framework_arrivals"


def watch(proto: Any) -> Arrivals | None:
    """The protocol's arrival log, its ``data_received`` wrapped once for its life (connections are pooled).

    After each call it logs the time, the response payload the bytes went to (aiohttp's ``_payload``: set
    while the headers are parsed, so bytes that came with the headers are stamped too; cleared when the
    body ends, so the one it had before the call takes the last bytes), that payload's byte count and the
    bytes' wait for the loop (polls). None where the protocol cannot take it: reads are then stamped.
    """
    try:
        log = getattr(proto, _LOG_ATTR, None)
        if log is not None:
            return log
        original = proto.data_received
        log = deque()
        try:
            clock = polls.clock_of(asyncio.get_running_loop())
        except RuntimeError:  # no running loop: no poll clock, waits unknown
            clock = None

        def data_received(data: bytes, _now: Any = time.perf_counter, _log: Arrivals = log,
                          _clock: polls.PollClock | None = clock) -> None:
            if not data:  # aiohttp's own call when it resumes reading: no bytes arrived
                original(data)
                return
            t = _now()
            before = getattr(proto, "_payload", None)
            original(data)
            payload = getattr(proto, "_payload", None) or before  # None once these bytes ended the body
            if payload is not None:
                _log.append((t, payload, payload.total_bytes, None if _clock is None else _clock.waited(t)))

        proto.data_received = data_received
        setattr(proto, _LOG_ATTR, log)
    except (AttributeError, TypeError):  # a protocol with slots, or another client library's
        return None
    return log


def log_of(resp: Any) -> Arrivals | None:
    """The log of `resp`'s connection with this response's entries first (earlier responses' dropped).

    The protocol is the response's own (``_protocol``, aiohttp 3.9 and later): a response whose body had
    all arrived by the time it was read has already given its connection back (``connection`` is None)."""
    proto = getattr(resp, "_protocol", None)  # not `or`: aiohttp's protocol is a queue, false when empty
    if proto is None:
        proto = getattr(getattr(resp, "connection", None), "protocol", None)
    content = getattr(resp, "content", None)
    if proto is None or not hasattr(content, "total_bytes"):
        return None
    log = watch(proto)
    while log and log[0][1] is not content:  # an earlier response's (or one that was never read)
        log.popleft()
    return log


def watch_connector(pool: Any) -> Any:
    """`pool` (an aiohttp connector) with every protocol it creates watched from its first byte.

    aiohttp's connectors make protocols with ``_factory`` (3.9 and later); a connector without one is left
    as it is and its protocols are watched from their first response (`log_of`)."""
    make: Callable[..., Any] | None = getattr(pool, "_factory", None)
    if callable(make):
        def factory(*args: Any, _make: Callable[..., Any] = make, **kwargs: Any) -> Any:
            proto = _make(*args, **kwargs)
            watch(proto)
            return proto

        pool._factory = factory
    return pool
