"""The client's self-check: it says when it fell behind, by how much its figures may be off, and not otherwise.

The real-server tests load the known-schedule server (framework.servers.schedule) far beyond what one
client core follows (256 streams, a token per stream every millisecond: 256k events/s, more than either
process can handle on any core) and very lightly (one stream, a token every 20 ms). Nothing is timed:
the assertions are on detection at the two extremes, which hold on a loaded 2-core machine too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from framework.core.workload import Workload
from framework.execution.client import client_health, run_workload
from framework.execution.client.selfcheck import BUSY_SATURATED, request_bias
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

ROW = {"chunk_times_s": [0.02, 0.04, 0.06, 0.08], "chunk_tokens": [1, 1, 1, 1], "e2e_s": 0.08, "ok": True}


def test_a_read_of_several_events_counts_only_while_the_client_was_busy():
    events = [1, 1, 1, 3]  # the last read carried 3 events of a 6-event stream spanning 60 ms: interval 12 ms
    busy = request_bias(ROW, events, lag=0.0, reads_count=True)
    assert busy["tpot_s"] == pytest.approx(2 * 0.012 / 0.06) and busy["ttft_s"] == 0.0
    assert busy["e2e_s"] == pytest.approx(2 * 0.012 / 0.08)
    assert request_bias(ROW, events, lag=0.0, reads_count=False)["tpot_s"] == 0.0  # idle: the server's batching
    assert request_bias(ROW, events, lag=0.0006, reads_count=False)["tpot_s"] == pytest.approx(0.01)


def test_health_flags_saturation_and_a_large_read_bias_but_not_a_light_load():
    light = client_health([], [1e-5] * 9, [ROW], cpu={"thread_s": 0.05, "wall_s": 1.0}, reads=[[1, 1, 1, 1]])
    assert not light["bottleneck"] and not light["saturated"] and light["events_per_read"]["mean"] == 1
    queued = client_health([], [1e-5] * 9, [ROW], cpu={"thread_s": 0.3, "run_queue_s": 0.65, "wall_s": 1.0},
                           reads=[[1, 1, 1, 1]])
    assert queued["saturated"] and queued["bottleneck"]  # kept off its core by others: as late as a busy client
    bunched = client_health([], [1e-5] * 9, [ROW], cpu={"thread_s": 0.6, "wall_s": 1.0}, reads=[[1, 1, 1, 3]])
    assert bunched["bottleneck"] and not bunched["saturated"] and bunched["bias"]["tpot_s"] > 0.3
    assert "off by up to" in bunched["reasons"][0]
    sim = client_health([], [1e-5] * 9, [{**ROW, "clock": "sim_model"}], cpu={"thread_s": 1.0, "wall_s": 1.0},
                        reads=[[1, 1, 1, 3]])
    assert not sim["bottleneck"]  # figures on the server's own clock do not depend on the client's reads


@pytest.fixture()
def schedule_server(tmp_path: Path):
    def start(first_ms: float, interval_ms: float) -> ServerProcess:
        port = free_port()
        argv = [sys.executable, "-m", "framework.servers.schedule", "--port", str(port), "--first-token-ms",
                str(first_ms), "--interval-ms", str(interval_ms)]
        return ServerProcess(ServerSpec(argv=argv, host="127.0.0.1", port=port, ready_timeout_s=30,
                                        log_path=tmp_path / f"server-{port}.log"))
    return start


def _health(proc: ServerProcess, workload: Workload, requests_n: int) -> dict:
    url = f"http://127.0.0.1:{proc.spec.port}"
    out = run_workload(url, workload, requests_n=requests_n, warmup=0, seed=1, protocol="openai",
                       on_row=lambda *a: None)
    return out["client"]


def test_a_load_far_beyond_one_core_is_detected_with_its_bias(schedule_server):
    with schedule_server(5, 1) as proc:
        health = _health(proc, Workload(prompt_tokens=4, output_tokens=64, concurrency=256), 256)
    assert health["bottleneck"] and health["saturated"] and health["cpu"]["busy"] >= BUSY_SATURATED
    assert health["events_per_read"]["mean"] > 1  # reads that each carried several of a stream's events


def test_a_very_light_load_is_not_flagged(schedule_server):
    with schedule_server(20, 20) as proc:
        health = _health(proc, Workload(prompt_tokens=4, output_tokens=20, concurrency=1), 3)
    assert not health["bottleneck"], health["reasons"]
    assert health["cpu"]["busy"] < BUSY_SATURATED and health["bias"]["tpot_s"] < 0.01
