"""The client survives a server's keep-alive: a real server process (tests/fixtures/keepalive_server.py) closes
idle connections after a fraction of a second, and a client starved of CPU (its event loop blocked past the
keep-alive, so the server's FIN waits unread) sends again on a pooled connection."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from framework.core.workload import Workload
from framework.execution.client import connection, measure_request, run_workload
from framework.execution.client.request import generate_body
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "keepalive_server.py"
KEEP_ALIVE_S = 0.3


def _server(tmp_path: Path, *extra: str) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), "--keep-alive", str(KEEP_ALIVE_S), *extra]
    return ServerProcess(ServerSpec(argv, "127.0.0.1", port, tmp_path / "server.log", ready_timeout_s=60))


@pytest.fixture
def quiet(tmp_path):
    with _server(tmp_path) as server:
        yield server.spec.base_url


@pytest.fixture
def announcing(tmp_path):
    with _server(tmp_path, "--announce") as server:
        yield server.spec.base_url


BODY = generate_body(list(range(8)), Workload(output_tokens=8))


def test_keep_alive_header_is_parsed_and_only_ever_lowers_the_idle_limit():
    assert connection.keep_alive_timeout({"Keep-Alive": "timeout=5, max=100"}) == 5.0
    assert connection.keep_alive_timeout({"Keep-Alive": "max=100"}) is None
    assert connection.keep_alive_timeout({}) is None
    assert connection.idle_limit(None) == connection.IDLE_DEFAULT_S
    assert connection.idle_limit(1.0) == 0.5
    assert connection.idle_limit(600.0) == connection.IDLE_DEFAULT_S  # a long keep-alive never raises it
    assert connection.idle_limit(0.0) == connection.MIN_IDLE_S
    # the default stays below uvicorn's and SGLang 0.5.9's 5 s keep-alive
    assert connection.IDLE_DEFAULT_S < 5.0


async def _starved_second_request(base_url: str, pool_idle_s: float, send) -> object:  # noqa: ANN001
    """One request, then the event loop blocked past the server's keep-alive (a starved client), then `send`."""
    async with aiohttp.ClientSession(connector=connection.connector(pool_idle_s)) as session:
        first = await measure_request(session, base_url, BODY, 30.0)
        assert first.ok, first.error
        time.sleep(KEEP_ALIVE_S * 3)  # blocks the loop: the server's close is not read before the next send
        return await send(session)


def test_a_starved_client_on_a_stale_pooled_connection_loses_the_request_without_a_retry(quiet):
    """The loss the retry is for, reproduced: aiohttp's own pool (idle limit 15 s) reuses the closed connection."""
    async def raw(session: aiohttp.ClientSession) -> str:
        try:
            async with session.post(quiet + "/generate", json=BODY) as resp:
                await resp.read()
                return "ok"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            return type(exc).__name__

    assert asyncio.run(_starved_second_request(quiet, 15.0, raw)) != "ok"


def test_the_request_is_sent_again_on_a_fresh_connection_and_counted(quiet):
    async def measured(session: aiohttp.ClientSession):  # noqa: ANN202
        return await measure_request(session, quiet, BODY, 30.0)

    row = asyncio.run(_starved_second_request(quiet, 15.0, measured))
    assert row.ok, row.error
    assert row.retries == 1
    assert row.completion_tokens == 8 and row.ttft_s is not None
    assert row.to_json()["retries"] == 1


def test_a_keep_alive_header_keeps_the_pool_from_reusing_a_connection_the_server_closes(announcing):
    async def measured(session: aiohttp.ClientSession):  # noqa: ANN202
        limit = session.connector._keepalive_timeout
        assert limit == pytest.approx(KEEP_ALIVE_S * connection.KEEP_ALIVE_SHARE)  # learnt from the first response
        return await measure_request(session, announcing, BODY, 30.0)

    row = asyncio.run(_starved_second_request(announcing, 15.0, measured))
    assert row.ok, row.error
    assert row.retries is None  # a fresh connection from the pool: nothing to retry
    assert "retries" not in row.to_json()


def test_a_closed_loop_paused_past_the_keep_alive_loses_no_request_and_the_launch_counts_retries(quiet, monkeypatch):
    """The whole client: 8 streams whose loop stalls (a CPU burner's share) longer than the keep-alive between
    requests; every request is served, each retry counted in its row and in the launch's client health."""
    import framework.execution.client.loops as loops

    real = loops.measure_request
    calls = [0]

    async def stalling(*a, **k):  # noqa: ANN002, ANN003, ANN202
        calls[0] += 1
        if calls[0] % 4 == 0:
            time.sleep(KEEP_ALIVE_S * 2)  # the whole loop stops, as a client starved of its core does
        return await real(*a, **k)

    monkeypatch.setattr(loops, "measure_request", stalling)
    monkeypatch.setattr(connection, "IDLE_DEFAULT_S", 15.0)  # as aiohttp's pool was: the retry must save it
    rows: list[dict] = []
    out = run_workload(quiet, Workload(output_tokens=16, concurrency=8), requests_n=48, warmup=4, seed=1,
                       on_row=lambda i, w, r: rows.append(r))
    measured = [r for r in rows if r["phase"] == "measured"]
    assert len(measured) == 48
    assert [r.get("error") for r in rows if not r["ok"] and r.get("error_class") != "cancelled"] == []
    retried = sum(r.get("retries", 0) for r in rows)
    print("retries", retried)
    assert retried > 0  # the stalls did hit stale connections: the retry, not luck, kept them
    assert out["client"]["connection_retries"] == retried


# --------------------------------------------------------------------------- a late read is not the server's merge


def _one_request(tmp_path: Path, *flags: str, stall_s: float = 0.0):  # noqa: ANN202
    """One 16-token request; `stall_s` blocks the client's loop that long from 20 ms after the send (starved)."""
    async def go():  # noqa: ANN202
        async with aiohttp.ClientSession(connector=connection.connector()) as session:
            async with session.get(base + "/health") as resp:  # a pooled connection: the send takes no connect
                await resp.read()
            if stall_s:
                asyncio.get_running_loop().call_later(0.02, time.sleep, stall_s)
            return await measure_request(session, base, generate_body(list(range(8)), Workload(output_tokens=16)),
                                         30.0)

    with _server(tmp_path, *flags) as server:
        base = server.spec.base_url
        return asyncio.run(go())


def test_one_event_is_the_servers_merge_and_separate_events_read_together_are_not(tmp_path):
    merged = _one_request(tmp_path, "--merge")
    assert merged.ok and merged.decode_unmeasured == "one_chunk"
    together = _one_request(tmp_path, "--one-write")
    assert together.ok and together.decode_unmeasured == "one_read"


def test_a_starved_client_that_reads_a_stream_late_is_not_told_the_server_merged_it(tmp_path):
    """The server writes 16 events 50 ms apart (its own timing, by construction); the client's loop is blocked
    for two seconds from 20 ms after the send, so every token waits in the socket and arrives in one read."""
    late = _one_request(tmp_path, "--token-gap-s", "0.05", stall_s=2.0)
    assert late.ok, late.error
    assert late.decode_unmeasured == "one_read" and len([n for n in late.chunk_tokens if n]) == 1
    from framework.core.vocabulary import DECODE_UNMEASURED

    assert "merged by the server" not in DECODE_UNMEASURED["one_read"]
    prompt = _one_request(tmp_path, "--token-gap-s", "0.05")  # the same server, a client that keeps up
    assert prompt.decode_unmeasured is None and len([n for n in prompt.chunk_tokens if n]) >= 8
