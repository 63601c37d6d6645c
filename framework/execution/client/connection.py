"""The client's keep-alive policy: never send on a pooled connection the server may have closed, and which
failures are safe to send again on a fresh one.

An HTTP server closes a connection that stayed idle longer than its keep-alive (uvicorn's default, under
vLLM and llama-cpp-python, and SGLang 0.5.9's HTTP server: 5 s). A client that reuses such a connection
writes into a socket the server has closed: "Can not write request body" or "Server disconnected", and the
request is lost though the server never saw it. A client starved of CPU is most exposed: the server's
FIN waits unread while the pool still holds the connection, and the pool's idle clock starts only when
the client got round to releasing it, late. So:

- the pool drops a connection idle for more than `IDLE_DEFAULT_S` (well below 5 s, a margin for a late
  release), or less where a response's ``Keep-Alive: timeout=N`` header says the server keeps it shorter
  (`learn`: `KEEP_ALIVE_SHARE` of N);
- a request whose connection failed before any byte of the response arrived (`retryable`) is sent again on
  a fresh connection, up to `MAX_RETRIES` times, and its row counts the retries (`RequestRow.retries`).
  Before the first response byte the server has answered nothing, and on a pooled connection it closed it
  has read nothing either, so the request is never served twice.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from framework.execution.client.arrivals import watch_connector

IDLE_DEFAULT_S = 2.0  # the pool's idle limit without a Keep-Alive header: below uvicorn's and SGLang's 5 s
KEEP_ALIVE_SHARE = 0.5  # of the server's announced keep-alive: the margin for a client that releases late
MIN_IDLE_S = 0.05  # never below this: a server announcing timeout=0 gets a connection per request, in effect
MAX_RETRIES = 2  # a third failure before any response byte is the server's, not a stale connection's

_TIMEOUT = re.compile(r"(?:^|[,;\s])timeout\s*=\s*([0-9]+(?:\.[0-9]*)?)", re.IGNORECASE)


def keep_alive_timeout(headers: Mapping[str, str] | None) -> float | None:
    """The server's keep-alive in seconds from its ``Keep-Alive: timeout=N[, max=M]`` header (None: not sent)."""
    value = (headers or {}).get("Keep-Alive")
    if not value:
        return None
    m = _TIMEOUT.search(value)
    return float(m.group(1)) if m else None


def idle_limit(announced_s: float | None, current_s: float = IDLE_DEFAULT_S) -> float:
    """The pool's idle limit once a server announced `announced_s` (pure): only ever lowered."""
    if announced_s is None:
        return current_s
    return max(MIN_IDLE_S, min(current_s, KEEP_ALIVE_SHARE * announced_s))


def connector(idle_s: float | None = None) -> Any:
    """The client's connection pool: no cap on connections, idle ones dropped after `idle_s` (`IDLE_DEFAULT_S`),
    every read stamped at the socket from a connection's first (client.arrivals)."""
    import aiohttp

    idle = IDLE_DEFAULT_S if idle_s is None else idle_s
    return watch_connector(aiohttp.TCPConnector(limit=0, keepalive_timeout=idle))


def learn(session: Any, headers: Mapping[str, str] | None) -> None:
    """Lower `session`'s pool idle limit to what the server's Keep-Alive header allows (no header: unchanged).

    aiohttp reads the limit (``_keepalive_timeout``) each time it takes a connection from the pool, and
    offers no setter; a pool without that attribute (another client library) is left as it is.
    """
    announced = keep_alive_timeout(headers)
    pool = getattr(session, "connector", None)
    current = getattr(pool, "_keepalive_timeout", None)
    if announced is None or not isinstance(current, (int, float)):
        return
    limit = idle_limit(announced, float(current))
    if limit < current:
        pool._keepalive_timeout = limit


def retryable(exc: BaseException) -> bool:
    """A connection failure that leaves a request unsent: it failed writing, was reset or disconnected.

    Only called for failures before the response's first byte (the caller's side of the rule); a timeout
    is not one of them (the server may be working on the request).
    """
    import aiohttp

    return isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionResetError,
                            BrokenPipeError)) and not isinstance(exc, aiohttp.ClientConnectorError)


def fresh_session() -> Any:
    """A session of one connection, never pooled: a retry's, so it cannot take another stale connection."""
    import aiohttp

    return aiohttp.ClientSession(connector=watch_connector(aiohttp.TCPConnector(force_close=True)))
