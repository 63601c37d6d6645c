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
from framework.execution.client.selfcheck import BIAS_WARN, CRITERION, request_bias
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

ROW = {"chunk_times_s": [0.02, 0.04, 0.06, 0.08], "chunk_tokens": [1, 1, 1, 1], "e2e_s": 0.08, "ok": True}


def test_the_last_token_is_the_newest_event_of_its_read():
    events = [1, 1, 1, 3]  # the last read carried 3 events of a 6-event stream spanning 60 ms: interval 12 ms
    late = request_bias(ROW, events, cap=1.0)
    # the pile-up says the loop was away ~24 ms, but the last token arrived last: only its own unseen part of
    # one interval (taken at its middle, 6 ms) is its wait (criterion 2 charged it the whole 24 ms)
    assert late["tpot_s"] == pytest.approx(0.006 / 0.06) and late["ttft_s"] == 0.0
    assert late["e2e_s"] == pytest.approx(0.006 / 0.08)
    # the loop was never away for more than 5 ms: the bunching was the server's beyond that
    assert request_bias(ROW, events, cap=0.005)["tpot_s"] == pytest.approx(0.005 / 0.06)
    assert request_bias(ROW, events, cap=0.0)["tpot_s"] == 0.0


def test_the_first_token_is_the_oldest_event_of_its_read_so_a_common_pile_up_reads_tpot_short():
    i = 0.06 / 7  # 8 events over 60 ms
    both = request_bias(ROW, [3, 1, 1, 3], cap=1.0)  # both reads piled 3 events: the loop was away ~2 intervals
    # the first token waited 2.5 intervals, the last 0.5: the field's TPOT reads short by 2 intervals
    assert both["tpot_s"] == pytest.approx(-2 * i / 0.06) and both["ttft_s"] == pytest.approx(2.5 * i / 0.02)
    first = request_bias(ROW, [3, 1, 1, 1], cap=1.0)  # only the first: 2.5 x 12 ms late
    assert first["tpot_s"] == pytest.approx(-2.5 * 0.012 / 0.06)
    assert request_bias(ROW, [3, 1, 1, 1], cap=0.01)["tpot_s"] == pytest.approx(-0.01 / 0.06)  # capped


def test_the_end_stamped_after_the_last_read_counts_in_tpot():
    row = {**ROW, "e2e_s": 0.083}  # the response's end stamped 3 ms after its last token's read
    assert request_bias(row, [1, 1, 1, 1], cap=0.0)["tpot_s"] == pytest.approx(0.003 / 0.06)
    assert request_bias(row, [1, 1, 1, 1], cap=0.0)["e2e_s"] == pytest.approx(0.003 / 0.083)


def test_measured_waits_replace_the_events_per_read():
    """Criterion 4: the two stamps' lateness as the loop's polls measured it (client.polls), whatever the reads
    carried. Three events in the first read behind a prompt loop were the server's batching: no bias."""
    prompt = request_bias(ROW, [3, 1, 1, 1], cap=1.0, waits=[0.0002, 0.0001, 0.0, 0.0002])
    assert prompt["tpot_s"] == pytest.approx(0.0) and prompt["ttft_s"] == pytest.approx(0.0002 / 0.02)
    late = request_bias(ROW, [1, 1, 1, 1], cap=1.0, waits=[0.009, 0.0, 0.0, 0.003])  # first read 9 ms late
    assert late["tpot_s"] == pytest.approx(-0.006 / 0.06) and late["e2e_s"] == pytest.approx(0.003 / 0.08)
    # a whole stream in one read: piled if the loop may have been away long enough for its events to pile up, by
    # the loop's bound (cap), not the read's wait: that is taken at the middle of a busy turn, and a pile's oldest
    # bytes waited longer (at 256 streams the measured waits of whole-stream reads ran 8-230 ms under a 213-377 ms
    # cap, and a launch whose few multi-read streams set a 1 ms interval read 0% where every stream was piled)
    one = {**ROW, "chunk_times_s": [0.08], "chunk_tokens": [4]}
    assert request_bias(one, [4], cap=1.0, interval_ref=0.02, waits=[0.0001])["tpot_s"] == 1.0
    assert request_bias(one, [4], cap=0.01, interval_ref=0.02, waits=[0.07])["tpot_s"] == 0.0
    health = client_health([], [1e-5] * 9, [ROW], reads=[[3, 1, 1, 1]], waits=[[0.0002, 0.0, 0.0, 0.0002]])
    assert health["criterion"] == CRITERION == 4 and not health["bottleneck"]
    late = client_health([], [1e-5] * 9, [ROW], reads=[[1, 1, 1, 1]], waits=[[0.009, 0.0, 0.0, 0.0]])
    assert late["bottleneck"] and late["bias"]["tpot_s"] == pytest.approx(0.15)


def test_health_flags_a_large_read_bias_but_not_a_busy_or_queued_loop():
    light = client_health([], [1e-5] * 9, [ROW], cpu={"thread_s": 0.05, "wall_s": 1.0}, reads=[[1, 1, 1, 1]])
    assert not light["bottleneck"] and not light["saturated"] and light["events_per_read"]["mean"] == 1
    assert light["criterion"] == CRITERION - 1 == 3  # no read's wait measured: criterion 3
    queued = client_health([], [1e-5] * 9, [ROW], cpu={"thread_s": 0.3, "run_queue_s": 0.65, "wall_s": 1.0},
                           reads=[[1, 1, 1, 1]])
    assert not queued["saturated"] and not queued["bottleneck"]  # busy 95%, but every read came alone
    assert queued["cpu"]["busy"] == pytest.approx(0.95)
    bunched = client_health([], [0.02] * 9, [ROW], cpu={"thread_s": 0.6, "wall_s": 1.0}, reads=[[1, 1, 1, 3]])
    assert bunched["bottleneck"] and not bunched["saturated"] and bunched["bias"]["tpot_s"] == pytest.approx(0.1)
    assert any("off by up to" in why for why in bunched["reasons"])
    batched = client_health([], [1e-5] * 9, [ROW], cpu={"thread_s": 0.6, "wall_s": 1.0}, reads=[[1, 1, 1, 3]],
                            stalls=[1e-4] * 9)  # a prompt loop: the three events came in one write
    assert batched["bias"]["tpot_s"] < BIAS_WARN and not batched["bottleneck"]
    stalled = client_health([], [1e-5] * 9, [ROW], cpu={"thread_s": 0.6, "wall_s": 1.0}, reads=[[1, 1, 1, 3]],
                            stalls=[0.03])  # its timer fired 30 ms late once: the loop was away that long
    assert stalled["bias"]["tpot_s"] == pytest.approx(0.1) and stalled["bottleneck"]
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
    assert health["bottleneck"] and health["bias"]["tpot_s"] > BIAS_WARN, health["reasons"]
    assert health["events_per_read"]["mean"] > 1  # reads that each carried several of a stream's events


def test_a_very_light_load_is_not_flagged(schedule_server):
    with schedule_server(20, 20) as proc:
        health = _health(proc, Workload(prompt_tokens=4, output_tokens=20, concurrency=1), 3)
    assert not health["bottleneck"], health["reasons"]
    assert not health["saturated"] and health["bias"]["tpot_s"] < BIAS_WARN


def test_cool_downs_that_end_with_the_last_measured_request_end_ok(schedule_server):
    """Same-schedule streams of one round end together: the cool-downs among them are not cancelled
    (they used to be whenever the last measured request's read came first, so request throughput depended
    on the order of reads)."""
    rows: list[dict] = []
    with schedule_server(5, 2) as proc:
        run_workload(f"http://127.0.0.1:{proc.spec.port}", Workload(prompt_tokens=4, output_tokens=16, concurrency=4),
                     requests_n=6, warmup=0, seed=1, protocol="openai", on_row=lambda i, u, r: rows.append(r))
    cool = [r for r in rows if r["phase"] == "cooldown"]
    assert cool and all(r["ok"] for r in cool), [r.get("error") for r in cool]


def test_a_whole_stream_in_one_read_counts_when_the_loop_was_away_long_enough():
    one = {"chunk_times_s": [0.1], "chunk_tokens": [6], "e2e_s": 0.1, "ok": True}
    assert request_bias(one, [6], cap=0.1, interval_ref=0.01) == {"tpot_s": 1.0, "decode_tok_s": 1.0}
    assert request_bias(one, [6], cap=0.002, interval_ref=0.01)["tpot_s"] == 0.0  # the server sent them together
    piled = client_health([], [0.001] * 9, [one] * 3 + [ROW], cpu={"thread_s": 1.0, "wall_s": 1.0},
                          reads=[[6]] * 3 + [[1, 1, 1, 1]], stalls=[0.2])
    assert piled["bias"]["tpot_s"] == 1.0 and piled["bottleneck"]
