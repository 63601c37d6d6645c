"""The arrival log: a connection's socket reads stamped in the protocol's data_received, from its first read
where the client's connector made it (framework.execution.client.arrivals)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from framework.execution.client import connection, polls
from framework.execution.client.arrivals import log_of
from framework.execution.launcher import ServerProcess, ServerSpec, free_port


def _schedule(port: int, first_ms: int, tokens: int) -> list[str]:
    return [sys.executable, "-m", "framework.servers.schedule", "--port", str(port), "--first-token-ms",
            str(first_ms), "--interval-ms", "1", "--tokens", str(tokens)]


def test_a_real_aiohttp_response_is_stamped_at_the_socket(tmp_path: Path):
    """The framework's aiohttp connections take the arrival stamp (else the client falls back to read times)."""
    import aiohttp

    port = free_port()
    # the first token long after the headers: its bytes arrive after the response exists, on any machine
    argv = _schedule(port, 300, 5)

    async def main() -> list[list[tuple[float, int]]]:
        out = []
        async with aiohttp.ClientSession() as session:
            for _ in range(2):  # the second on the pooled connection, whose wrapper was installed by the first
                async with session.post(f"http://127.0.0.1:{port}/v1/completions", json={"stream": True}) as resp:
                    log = log_of(resp)
                    assert log is not None
                    body = await resp.read()
                    assert body.count(b"data: {") == 5
                    out.append([(t, n) for t, payload, n, _ in log if payload is resp.content])
                    assert out[-1][-1][1] == len(body)  # the bytes that ended the body are stamped too
        return out

    with ServerProcess(ServerSpec(argv=argv, host="127.0.0.1", port=port, log_path=tmp_path / "s.log",
                                  ready_timeout_s=30)):
        logs = asyncio.run(main())
    for stamps in logs:
        assert [t for t, _ in stamps] == sorted(t for t, _ in stamps)
        assert [n for _, n in stamps] == sorted(n for _, n in stamps)  # body bytes fed so far, growing


def test_a_fresh_connections_first_read_is_stamped_where_the_clients_connector_made_it(tmp_path: Path):
    """The client's loop blocked while the server sent the headers and the whole stream: their bytes came in
    the connection's first read, before the response existed. The client's connector watched the protocol
    from its creation, so that read is stamped (when it arrived, before post() returned) with its wait for the loop."""
    import aiohttp

    port = free_port()

    async def blocked(*_: object) -> None:
        time.sleep(0.3)  # the loop held after the request went out: the server's bytes pile up unread

    async def main() -> tuple[list[tuple[float, int, float | None]], float, int]:
        polls.install(asyncio.get_running_loop())  # each read's wait, as the client's loops do
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(blocked)
        async with aiohttp.ClientSession(connector=connection.connector(), trace_configs=[trace]) as session:
            async with session.post(f"http://127.0.0.1:{port}/v1/completions", json={"stream": True}) as resp:
                returned = time.perf_counter()
                log = log_of(resp)
                assert log is not None
                body = await resp.read()
                assert resp.connection is None  # given back with the body's end, its log still found
                assert log_of(resp) is log
                return [(t, n, w) for t, payload, n, w in log if payload is resp.content], returned, len(body)

    with ServerProcess(ServerSpec(argv=_schedule(port, 1, 5), host="127.0.0.1", port=port,
                                  log_path=tmp_path / "s.log", ready_timeout_s=30)):
        stamps, returned, size = asyncio.run(main())
    assert stamps and stamps[0][0] < returned  # the headers' read, stamped when it arrived
    assert stamps[-1][1] == size
    assert all(w is not None for _, _, w in stamps)  # and its wait for the loop (client.polls)
