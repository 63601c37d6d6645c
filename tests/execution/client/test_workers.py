"""The multi-process client: the setting, the split of a plan, and 1 against 2 workers on the real sim.

What is exactly equal and what only statistically: a closed loop's requests go out in the plan's order
from one shared state, and the sim serves a closed loop on its model clock by the order requests reach
it, so every analysed row's model-clock figures are identical with 1 and 2 workers (the wall-clock ones,
`start_s`, `sent_at`, `wall_*`, never are, not even between two 1-worker runs; a cool-down request is
cancelled at a wall-clock moment). An open loop's arrivals are split between the workers, and two
arrivals scheduled a fraction of a millisecond apart can reach the sim in either order; the sim then
gives the earlier promise to the one that came first, so the figures agree in distribution, not row by row.
"""

from __future__ import annotations

import statistics
import sys

import numpy as np
import pytest

from framework.core.workload import Workload, make_plan
from framework.execution.client import run_workload, worker_count
from framework.execution.client.workers import (
    AUTO,
    MAX_WORKERS,
    merge_health,
    parse_workers,
    split_arrivals,
    split_streams,
)
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

SPEEDUP = 4.0
MODEL_FIGURES = ("ok", "phase", "completion_tokens", "prompt_tokens", "ttft_s", "tpot_s", "e2e_s", "decode_tok_s",
                 "model_start_s", "chunk_model_times_s", "chunk_model_tokens", "planned_output_tokens")


# --------------------------------------------------------------------------- the setting and the split (pure)


@pytest.mark.parametrize("value", [0, -1, MAX_WORKERS + 1, 1.5, True, "two", "", None, "0"])
def test_a_bad_worker_count_is_refused_with_what_is_allowed(value):
    with pytest.raises(ValueError, match=r"from 1 to \d+, or auto"):
        parse_workers(value)


@pytest.mark.parametrize("value,expected", [(1, 1), (4, 4), ("8", 8), ("auto", AUTO), (" AUTO ", AUTO)])
def test_a_good_worker_count_is_kept(value, expected):
    assert parse_workers(value) == expected


def test_auto_is_one_on_two_cores_and_scales_with_cores_and_streams():
    closed = Workload(concurrency=256)
    assert worker_count(AUTO, closed, cores=2) == 1
    assert worker_count(AUTO, closed, cores=16) == 11  # 3/4 of 16, less one
    assert worker_count(AUTO, closed, cores=128) == 16  # one per 16 streams
    assert worker_count(AUTO, Workload(concurrency=16), cores=16) == 1
    assert worker_count(8, Workload(concurrency=3)) == 3  # never more workers than streams
    assert worker_count(4, Workload(request_rate=10.0)) == 4
    assert worker_count(4, Workload(request_rate=10.0, max_concurrency=8)) == 1  # one semaphore, one process


def test_streams_and_arrivals_are_split_exactly_once():
    rng = np.random.default_rng(23)
    for _ in range(200):
        streams, n = int(rng.integers(1, 300)), int(rng.integers(1, 40))
        parts = split_streams(streams, n)
        assert sum(parts) == streams and max(parts) - min(parts) <= 1
    plan = make_plan(Workload(request_rate=50.0, prompt_tokens=8, output_tokens=4), requests_n=97, warmup=3, seed=4)
    for n in (1, 2, 3, 8):
        parts = split_arrivals(plan.requests, n)
        sent = sorted(r.index for part in parts for r in part)
        assert sent == [r.index for r in plan.requests]  # every arrival, once
        for part in parts:  # each worker's in schedule order
            assert [r.send_at_s for r in part] == sorted(r.send_at_s for r in part)


# --------------------------------------------------------------------------- against the real sim


def run(tmp_path, workload: Workload, workers: int, requests_n: int, warmup: int) -> tuple[dict[int, dict], dict]:
    """One launch on a fresh sim (its seeded noise starts anew: a second workload on one server draws other noise)."""
    port = free_port()
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--sim-speedup", str(SPEEDUP), "--sim-startup-s", "0", "--random-seed", "7"]
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, tmp_path / f"sim{workers}.log", ready_timeout_s=60)) as srv:
        return _measure(srv.spec.base_url, workload, workers, requests_n, warmup)


def _measure(url: str, workload: Workload, workers: int, requests_n: int, warmup: int) -> tuple[dict[int, dict], dict]:
    rows: dict[int, dict] = {}

    def on_row(index: int, unanalysed: bool, row: dict) -> None:
        assert index not in rows  # each request once
        assert unanalysed == (row["phase"] != "measured")
        rows[index] = row

    out = run_workload(url, workload, requests_n=requests_n, warmup=warmup, seed=5, time_scale=SPEEDUP,
                       on_row=on_row, workers=workers)
    return rows, out


def test_a_closed_loop_on_two_workers_measures_what_one_does(tmp_path):
    w = Workload(prompt_tokens={"dist": "uniform", "low": 32, "high": 256},
                 output_tokens={"dist": "uniform", "low": 16, "high": 64}, concurrency=8)
    one, out1 = run(tmp_path, w, 1, requests_n=3, warmup=1)
    two, out2 = run(tmp_path, w, 2, requests_n=3, warmup=1)
    assert out1["client"]["workers"] == 1 and out2["client"]["workers"] == 2
    assert sorted(one) == sorted(two) == list(range(len(one)))
    analysed = [i for i, r in one.items() if r["phase"] != "cooldown"]
    assert len(analysed) == out1["measured"] + out1["warmup"] >= 16  # measured and warm-up: every stream twice
    for i in analysed:
        assert one[i]["clock"] == "sim_model" and one[i]["ok"], one[i].get("error")
        assert {k: one[i].get(k) for k in MODEL_FIGURES} == {k: two[i].get(k) for k in MODEL_FIGURES}, i
    assert len({one[i]["tpot_s"] for i in analysed}) > 1  # the requests differ; the two runs do not


def test_an_open_loop_sends_each_arrival_once_on_its_schedule_from_two_workers(tmp_path):
    w = Workload(prompt_tokens=64, output_tokens={"dist": "uniform", "low": 16, "high": 64}, request_rate=20.0)
    one, out1 = run(tmp_path, w, 1, requests_n=40, warmup=2)
    two, out2 = run(tmp_path, w, 2, requests_n=40, warmup=2)
    plan = make_plan(w, requests_n=40, warmup=2, seed=5)
    assert sorted(two) == [r.index for r in plan.requests]
    assert out2["client"]["workers"] == 2 and out2["client"]["send_lateness_wall_s"]["n"] == len(plan.requests)
    assert out2["schedule_sha256"] == out1["schedule_sha256"]
    for req in plan.requests:
        row = two[req.index]
        assert row["ok"], row.get("error")
        assert row["scheduled_s"] == one[req.index]["scheduled_s"]  # the same schedule, from the same start
        assert row["start_s"] >= row["scheduled_s"] - 1e-6  # never early
    # the figures: the same in distribution (arrivals a fraction of a millisecond apart may swap, see above)
    for key in ("tpot_s", "ttft_s"):
        m1 = statistics.median(r[key] for r in one.values() if r["phase"] == "measured")
        m2 = statistics.median(r[key] for r in two.values() if r["phase"] == "measured")
        assert m2 == pytest.approx(m1, rel=0.1), key


def test_the_launch_health_is_the_worst_workers_self_check_and_every_workers_samples():
    def raw(busy: float, bias: float | None, saturated: bool, reasons: list[str], lateness: list[float]) -> dict:
        health = {"cpu": {"thread_s": busy, "wall_s": 1.0, "busy": busy}, "bias": {"tpot_s": bias, "ttft_s": None},
                  "saturated": saturated, "reasons": reasons, "events_per_read": {"mean": 1 + busy},
                  "criterion": 4}
        return {"health": health, "lateness": lateness, "loop_lag": [1e-5] * 3}

    calm = raw(0.2, 0.001, False, [], [0.0] * 4)
    behind = raw(0.95, 0.2, True, ["the client's event loop was running ... 95%", "median send lateness 3.00 ms"],
                 [0.003] * 4)
    merged = merge_health([calm, behind], [], t_origin=12.5)
    assert merged["workers"] == 2 and merged["saturated"] and merged["bottleneck"] and merged["criterion"] == 4
    assert merged["bias"]["tpot_s"] == 0.2 and merged["bias"]["ttft_s"] is None
    assert merged["cpu"]["busy"] == 0.95 and len(merged["cpu"]["per_worker"]) == 2
    assert merged["events_per_read"]["mean"] == 1.95 and merged["clock_origin_s"] == 12.5
    assert merged["send_lateness_wall_s"]["n"] == 8  # every worker's sends
    # lateness is judged once over every worker's sends (median 1.5 ms here); the rest is each worker's own
    assert merged["reasons"][0].startswith("median send lateness 1.50 ms")
    assert merged["reasons"][1:] == ["worker 1: the client's event loop was running ... 95%"]
    quiet = merge_health([calm, calm], [], t_origin=0.0)
    assert not quiet["bottleneck"] and not quiet["saturated"] and quiet["reasons"] == []
