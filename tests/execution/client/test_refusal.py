"""A refused connection is its own request error class (issue 31): nothing listened, the server is gone."""

from __future__ import annotations

import asyncio
import errno
import socket

import aiohttp

from framework.core.spec import Workload
from framework.execution.client.refusal import refused
from framework.execution.client.request import generate_body, measure_request


def _closed_port() -> int:
    """A port that was just bound and released: nothing listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _measure(url: str):
    async def go():
        async with aiohttp.ClientSession() as session:
            return await measure_request(session, url, generate_body([1, 2, 3], Workload()), 10.0)

    return asyncio.run(go())


def test_a_request_to_a_port_nobody_listens_on_is_refused_not_cut():
    row = _measure(f"http://127.0.0.1:{_closed_port()}")
    assert not row.ok and row.error_class == "connection_refused", (row.error_class, row.error)
    assert "refused" in row.error.lower()


def test_only_a_refusal_is_a_refusal():
    assert refused(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    wrapped = OSError(errno.ECONNREFUSED, "Connect call failed")
    assert refused(wrapped)
    try:
        try:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")
        except ConnectionRefusedError as inner:
            raise aiohttp.ClientConnectionError("cannot connect") from inner
    except aiohttp.ClientConnectionError as outer:
        assert refused(outer)
    assert not refused(ConnectionResetError(errno.ECONNRESET, "reset by peer"))
    assert not refused(aiohttp.ServerDisconnectedError())
    assert not refused(OSError(errno.EHOSTUNREACH, "no route to host"))
