"""The client's derived figures from raw chunk times (pure part)."""

import pytest

from framework.execution.client.request import prompt_ids
from framework.execution.client.stream import summarize_stream


def test_decode_rate_counts_tokens_after_the_first_chunk():
    times = [0.05, 0.06, 0.07, 0.08]  # first token at 50 ms, then one per 10 ms
    out = summarize_stream(times, [1, 1, 1, 1], e2e=0.081, time_scale=1.0, meta={})
    assert out["ttft_s"] == pytest.approx(0.05)
    assert out["decode_tok_s"] == pytest.approx(3 / 0.03)
    assert out["tpot_s"] == pytest.approx(0.01)
    assert out["completion_tokens"] == 4


def test_multi_token_chunks_and_accept_length():
    out = summarize_stream([0.1, 0.2, 0.3], [1, 3, 2], e2e=0.3, time_scale=1.0,
                           meta={"spec_verify_ct": 3})
    assert out["decode_tok_s"] == pytest.approx(5 / 0.2)
    assert out["accept_length"] == pytest.approx(2.0)


def test_time_scale_converts_wall_to_model_seconds():
    fast = summarize_stream([0.005, 0.015], [1, 1], e2e=0.02, time_scale=10.0, meta={})
    assert fast["ttft_s"] == pytest.approx(0.05)
    assert fast["decode_tok_s"] == pytest.approx(1 / 0.1)


def test_no_tokens_gives_no_rates():
    out = summarize_stream([], [], e2e=1.0, time_scale=1.0, meta={})
    assert out["decode_tok_s"] is None and out["ttft_s"] is None


def test_prompts_are_reproducible_and_distinct():
    assert prompt_ids(1, 0, 16) == prompt_ids(1, 0, 16)
    assert prompt_ids(1, 0, 16) != prompt_ids(1, 1, 16)
    assert len(prompt_ids(1, 0, 128)) == 128


# ------------------------------------------------------------------ failures over real HTTP

import asyncio  # noqa: E402
import http.server  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import aiohttp  # noqa: E402

from framework.core.spec import Workload  # noqa: E402
from framework.core.trials import RequestRow  # noqa: E402
from framework.execution.client.request import generate_body, measure_request  # noqa: E402


def _measure(url: str, body: dict, timeout: float) -> RequestRow:
    async def go() -> RequestRow:
        async with aiohttp.ClientSession() as session:
            return await measure_request(session, url, body, timeout)

    return asyncio.run(go())


class _Misbehaving(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "500":
            body = b'{"error": {"message": "boom"}}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")  # as uvicorn streams
        self.end_headers()
        for n in (1, 2):
            event = {"text": "x" * n, "meta_info": {"id": "r", "completion_tokens": n, "finish_reason": None}}
            data = b"data: " + json.dumps(event).encode() + b"\n\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            if mode == "slow":
                time.sleep(2.0)
        self.close_connection = True  # cut: no finished event, no [DONE]

    def log_message(self, *a: object) -> None:
        pass


def _serve(mode: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Misbehaving)
    server.mode = mode  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("mode,timeout,fragment", [
    ("500", 10.0, "HTTP 500"),
    ("cut", 10.0, "stream ended before the request finished (2 tokens received)"),
    ("slow", 1.0, "timed out: no data for 1 s (1 tokens received)"),
])
def test_failures_become_failed_rows_with_a_reason(mode, timeout, fragment):
    server, url = _serve(mode)
    try:
        row = _measure(url, generate_body([1, 2, 3], Workload()), timeout)
    finally:
        server.shutdown()
    assert row.ok is False
    assert fragment.lower() in row.error.lower(), row.error


def test_sse_comments_such_as_keep_alive_pings_are_not_events():
    from framework.execution.client.stream import sse_data

    assert sse_data(b": ping - 2026-11-30 12:02:58.123456+00:00") == b""
    assert sse_data(b'data: {"a": 1}') == b'{"a": 1}'
    assert sse_data(b'event: message\r\nid: 3\r\ndata: {"a": 1}') == b'{"a": 1}'
    assert sse_data(b"data: [DONE]") == b"[DONE]"


def test_a_cancelled_closed_loop_sends_nothing_more():
    # SIGTERM during a request: asyncio.run's shutdown cancels every task once; measure_request absorbs the
    # cancel into a "cancelled" row, and a stream that went on would post on the closed session ("Session is
    # closed", a 37-line traceback after the resume line)
    import asyncio

    from framework.core.workload import make_plan
    from framework.execution.client.loops import _closed_loop

    plan = make_plan(Workload(concurrency=2), requests_n=20, warmup=0, seed=1)
    sent: list[int] = []

    async def one(session, req, more=False):
        sent.append(req.index)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # as measure_request does

    async def main():
        loop = asyncio.ensure_future(_closed_loop(plan, None, one))
        while len(sent) < 2:
            await asyncio.sleep(0)
        for t in asyncio.all_tasks():
            if t is not asyncio.current_task():
                t.cancel()
        await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(main())
    assert sorted(sent) == [0, 1]
