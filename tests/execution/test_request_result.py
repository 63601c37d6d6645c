"""The client's RequestRow (framework.core.trials) gives exactly the rows the client wrote before it had a typed row.

Old trial files and the audit's recomputation read these rows, so their keys and values (and their JSON
types: 0 stays 0) are pinned here, as `on_row` receives them (`RequestRow.measured()`) and as the launch
writes them (stamped and validated into the same model; the writer sorts the keys, so their order is moot).
The expected rows below are what the dict-building client (framework/execution/client.py at bff8e99) returned
for the same streams under the same fixed clock, plus the decode's
parts (`decode_tokens`, `decode_s`) the client writes since rules version 2 where decode was measured.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import aiohttp
import pytest

from framework.core.trials import RequestRow
from framework.core.workload import Workload
from framework.execution.client import loops, request
from framework.execution.launcher import free_port

# ------------------------------------------------------------------ one request, over a fake session


class _Clock:
    """perf_counter advancing 0.25 s per call: every figure comes out exact."""

    def __init__(self) -> None:
        self.t = 0.0

    def perf_counter(self) -> float:
        self.t += 0.25
        return self.t


class _FixedDatetime:
    @staticmethod
    def now(tz: dt.tzinfo) -> dt.datetime:
        return dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=tz)


class _Content:
    def __init__(self, pieces: list) -> None:
        self.pieces = pieces

    async def iter_any(self):
        for p in self.pieces:
            if isinstance(p, Exception):
                raise p
            yield p


class _Response:
    def __init__(self, status: int, pieces: list) -> None:
        self.status, self.content = status, _Content(pieces)

    async def text(self) -> str:
        return '{"error": "overloaded"}'

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> bool:
        return False


class _Session:
    def __init__(self, status: int, pieces: list) -> None:
        self.response = _Response(status, pieces)

    def post(self, *args: object, **kwargs: object) -> _Response:
        return self.response


def _event(n: int, finished: bool, **meta: object) -> bytes:
    info = {"id": "r1", "completion_tokens": n, "prompt_tokens": 5,
            "finish_reason": {"type": "length"} if finished else None, **meta}
    return b"data: " + json.dumps({"meta_info": info}).encode() + b"\n\n"


@pytest.fixture
def measure(monkeypatch):
    monkeypatch.setattr(request, "time", _Clock())
    monkeypatch.setattr(request, "datetime", _FixedDatetime)

    def go(status: int, pieces: list) -> RequestRow:
        return asyncio.run(request.measure_request(_Session(status, pieces), "http://x", {"input_ids": [1, 2, 3]},
                                                   30.0, 2.0, None, "generate", 0.0))

    return go


MEASURED_KEYS = ["ok", "error", "error_class", "endpoint", "prompt_tokens", "token_count_source", "chunk_times_s",
                 "chunk_tokens", "time_scale", "sent_at", "start_s", "server_request_id", "sim_max_lag_s",
                 "sim_first_lag_s", "sim_last_lag_s", "completion_tokens", "e2e_s", "ttft_s", "tpot_s",
                 "decode_tok_s", "output_tok_s", "accept_length", "clock"]
MODEL_CLOCK_KEYS = ["chunk_model_times_s", "chunk_model_tokens", "wall_ttft_s", "wall_tpot_s", "wall_e2e_s",
                    "wall_decode_tok_s", "wall_output_tok_s", "sim_mean_batch", "sim_arrival_model_s"]
DECODE_KEYS = ["decode_tokens", "decode_s"]
SENT_AT = "2026-01-02T03:04:05+00:00"
NO_SIM_LAGS = {"sim_max_lag_s": None, "sim_first_lag_s": None, "sim_last_lag_s": None}


STAMP = {"format": 2, "launch_id": "L", "condition": 0, "levels": {"f": "a"}}
ALWAYS = {"phase": None, "scheduled_s": None, "send_lateness_wall_s": None}  # the written row's, where unset


def _keys(keys: list[str]) -> set[str]:
    """The keys a row keeps of the client's old ones: a sim_* field only when the server sent it."""
    return set(keys) - set(NO_SIM_LAGS) | set(ALWAYS)


def _same_row(row: dict, expected: dict) -> None:
    """`row` is the old client row `expected` (less the sim_* fields the server did not send), and the launch
    writes from it what it wrote from the old one."""
    old = {**ALWAYS, **{k: v for k, v in expected.items() if not (v is None and k.startswith("sim_"))}}
    assert json.dumps(row, sort_keys=True) == json.dumps(old, sort_keys=True)  # same values, same types
    stamp = {**STAMP, "trial_id": "L-q0", "index": 0, "warmup": False}
    written = RequestRow(**stamp, **row).to_json()
    assert json.dumps(written, sort_keys=True) == json.dumps({**stamp, "kind": "request", **old}, sort_keys=True)


def test_a_success_gives_the_old_row(measure):
    row = measure(200, [_event(1, False), _event(3, False), _event(4, True), b"data: [DONE]\n\n"]).measured()
    _same_row(row, {
        "ok": True, "error": None, "error_class": None, "endpoint": "generate", "prompt_tokens": 5,
        "token_count_source": "meta_info", "chunk_times_s": [0.25, 0.5, 0.75], "chunk_tokens": [1, 2, 1],
        "time_scale": 2.0, "sent_at": SENT_AT, "start_s": 0.5, "server_request_id": "r1", **NO_SIM_LAGS,
        # e2e ends when the last bytes ([DONE]) arrived, not when the client closed the stream a tick later
        "completion_tokens": 4, "e2e_s": 2.0, "ttft_s": 0.5, "tpot_s": 0.3333333333333333, "decode_tok_s": 3.0,
        "output_tok_s": 2.0, "accept_length": None, "clock": "wall", "decode_tokens": 3, "decode_s": 1.0,
    })
    assert set(row) == _keys(MEASURED_KEYS + DECODE_KEYS)


def test_an_http_error_gives_the_old_row(measure):
    row = measure(503, []).measured()
    _same_row(row, {
        "ok": False, "error": 'HTTP 503: {"error": "overloaded"}', "error_class": "http_error",
        "endpoint": "generate", "prompt_tokens": 3, "token_count_source": "meta_info", "chunk_times_s": [],
        "chunk_tokens": [], "time_scale": 2.0, "sent_at": SENT_AT, "start_s": 0.5, "server_request_id": None,
        **NO_SIM_LAGS, "completion_tokens": 0, "e2e_s": 0.5, "ttft_s": None, "tpot_s": None,
        "decode_tok_s": None, "output_tok_s": 0.0, "accept_length": None, "clock": "wall",
    })


def test_a_stream_that_ends_unfinished_gives_the_old_row(measure):
    row = measure(200, [_event(1, False), _event(2, False)]).measured()
    _same_row(row, {
        "ok": False, "error": "stream ended before the request finished (2 tokens received)",
        "error_class": "stream_cut", "endpoint": "generate", "prompt_tokens": 5, "token_count_source": "meta_info",
        "chunk_times_s": [0.25, 0.5], "chunk_tokens": [1, 1], "time_scale": 2.0, "sent_at": SENT_AT,
        "start_s": 0.5, "server_request_id": "r1", **NO_SIM_LAGS, "completion_tokens": 2, "e2e_s": 1.5,
        "ttft_s": 0.5, "tpot_s": 0.5, "decode_tok_s": 2.0, "output_tok_s": 1.3333333333333333,
        "accept_length": None, "clock": "wall", "decode_tokens": 1, "decode_s": 0.5,
    })


def test_a_stream_cut_mid_chunk_gives_the_old_row(measure):
    row = measure(200, [_event(1, False), aiohttp.ClientPayloadError("connection lost")]).measured()
    _same_row(row, {
        "ok": False, "error": "stream ended before the request finished (1 tokens received): connection lost",
        "error_class": "stream_cut", "endpoint": "generate", "prompt_tokens": 5, "token_count_source": "meta_info",
        "chunk_times_s": [0.25], "chunk_tokens": [1], "time_scale": 2.0, "sent_at": SENT_AT, "start_s": 0.5,
        "server_request_id": "r1", **NO_SIM_LAGS, "completion_tokens": 1, "e2e_s": 1.0, "ttft_s": 0.5,
        "tpot_s": None, "decode_tok_s": None, "output_tok_s": 1.0, "accept_length": None, "clock": "wall",
    })


def test_a_success_on_the_sims_model_clock_gives_the_old_row(measure):
    row = measure(200, [
        _event(1, False, sim_model_t=0.5), _event(2, False, sim_model_t=0.75),
        _event(3, True, sim_model_t=1.0, sim_max_lag_s=0.001, sim_first_lag_s=0, sim_last_lag_s=0.002,
               sim_mean_batch=3, sim_arrival_model_s=12.5),
    ]).measured()
    _same_row(row, {
        "ok": True, "error": None, "error_class": None, "endpoint": "generate", "prompt_tokens": 5,
        "token_count_source": "meta_info", "chunk_times_s": [0.25, 0.5, 0.75], "chunk_tokens": [1, 1, 1],
        "time_scale": 2.0, "sent_at": SENT_AT, "start_s": 0.5, "server_request_id": "r1", "sim_max_lag_s": 0.001,
        "sim_first_lag_s": 0, "sim_last_lag_s": 0.002, "completion_tokens": 3, "e2e_s": 1.0, "ttft_s": 0.5,
        "tpot_s": 0.25, "decode_tok_s": 4.0, "output_tok_s": 3.0, "accept_length": None, "clock": "sim_model",
        "chunk_model_times_s": [0.5, 0.75, 1.0], "chunk_model_tokens": [1, 1, 1], "wall_ttft_s": 0.5,
        "wall_tpot_s": 0.5, "wall_e2e_s": 1.5, "wall_decode_tok_s": 2.0, "wall_output_tok_s": 2.0,
        "decode_tokens": 2, "decode_s": 0.5, "sim_mean_batch": 3, "sim_arrival_model_s": 12.5,
    })
    assert set(row) == set(MEASURED_KEYS + MODEL_CLOCK_KEYS + DECODE_KEYS) | set(ALWAYS)  # the sim sent its lags


def test_ok_follows_the_error(measure):
    assert measure(200, [_event(1, True)]).ok
    failed = measure(503, [])
    assert not failed.ok and failed.measured()["ok"] is False


# ------------------------------------------------------------------ the load loop's side of the row

PLANNED = ["phase", "planned_prompt_tokens", "planned_output_tokens"]


def _canned(model_clock: bool, prompt_tokens: int = 7) -> RequestRow:
    result = RequestRow(
        ok=True, error=None, error_class=None, endpoint="generate", prompt_tokens=prompt_tokens,
        token_count_source="meta_info", chunk_times_s=[0.1, 0.2], chunk_tokens=[1, 1], time_scale=1.0,
        sent_at=SENT_AT, start_s=0.25, server_request_id="r", sim_max_lag_s=None, sim_first_lag_s=None,
        sim_last_lag_s=None, completion_tokens=2, e2e_s=0.2, ttft_s=0.1, tpot_s=0.1, decode_tok_s=10.0,
        output_tok_s=10.0, accept_length=None, clock="wall",
    )
    if not model_clock:
        return result
    return result.completed(clock="sim_model", chunk_model_times_s=[0.1, 0.2], chunk_model_tokens=[1, 1],
                   wall_ttft_s=0.1, wall_tpot_s=None, wall_e2e_s=0.2, wall_decode_tok_s=None, wall_output_tok_s=10.0,
                   sim_arrival_model_s=40.25)


def _rows(monkeypatch, workload: Workload, result: RequestRow, **kw) -> list[dict]:
    """The rows run_workload hands to on_row when every request measures `result` (no server needed)."""
    async def fake_measure(*args: object, **kwargs: object) -> RequestRow:
        await asyncio.sleep(0)
        return result

    monkeypatch.setattr(loops, "measure_request", fake_measure)
    rows: list[dict] = []
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the pool warm-up's pings fail quietly
    loops.run_workload(url, workload, requests_n=2, warmup=0, seed=1, on_row=lambda i, u, row: rows.append(row),
                       **kw)
    return rows


def test_closed_loop_rows_add_the_plans_side_after_the_figures(monkeypatch):
    rows = _rows(monkeypatch, Workload(prompt_tokens=9, output_tokens=4), _canned(False))
    assert rows and all(set(r) == _keys(MEASURED_KEYS + PLANNED) for r in rows)
    assert {(r["phase"], r["planned_prompt_tokens"], r["planned_output_tokens"]) for r in rows} == {("measured", 9, 4)}
    assert all(r["prompt_tokens"] == 7 for r in rows)  # the server's count wins over the plan's


def test_a_server_without_a_prompt_count_gets_the_planned_one(monkeypatch):
    rows = _rows(monkeypatch, Workload(prompt_tokens=9, output_tokens=4), _canned(False, prompt_tokens=0))
    assert rows and all(r["prompt_tokens"] == 9 for r in rows)


def test_open_loop_rows_carry_the_schedule_before_the_phase(monkeypatch):
    rows = _rows(monkeypatch, Workload(prompt_tokens=9, output_tokens=4, request_rate=100.0), _canned(False))
    assert rows and all(set(r) == _keys(MEASURED_KEYS + PLANNED) for r in rows)
    assert all(isinstance(r["scheduled_s"], float) and isinstance(r["send_lateness_wall_s"], float) for r in rows)


def test_model_clock_rows_end_with_the_model_start(monkeypatch):
    rows = _rows(monkeypatch, Workload(prompt_tokens=9, output_tokens=4), _canned(True))
    assert rows and all(set(r) == _keys(MEASURED_KEYS + MODEL_CLOCK_KEYS[:-2] + ["sim_arrival_model_s"] + PLANNED
                                          + ["model_start_s"]) for r in rows)
    # the sim admits the loop's requests on the loop's own clock: its arrival there is the send on the model clock
    assert all(r["model_start_s"] == r["sim_arrival_model_s"] for r in rows)


def test_dataset_rows_end_with_the_dataset_row(monkeypatch, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"prompt {i}", "output_len": 4}) + "\n" for i in range(3)))
    rows = _rows(monkeypatch, Workload(dataset={"path": str(data)}), _canned(False))
    assert rows and all(set(r) == _keys(MEASURED_KEYS + PLANNED + ["dataset_row"]) for r in rows)
    assert all(isinstance(r["dataset_row"], int) for r in rows)
