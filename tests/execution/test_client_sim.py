"""The client against the real simulated server process: steady concurrency, open-loop timing, endpoints."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from framework.core.workload import Workload
from framework.execution.client import run_workload
from framework.execution.launcher import ServerProcess, ServerSpec, free_port

SPEEDUP = 4.0  # slow enough that a loaded 2-core machine keeps the sim on its clock


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    argv = [sys.executable, "-m", "framework.servers.sim", "--model-path", "m", "--tp-size", "8", "--port", str(port),
            "--sim-speedup", str(SPEEDUP), "--sim-noise-scale", "0", "--sim-startup-s", "0", "--random-seed", "3"]
    with ServerProcess(ServerSpec(argv, "127.0.0.1", port, log, ready_timeout_s=60)) as server:
        yield server.spec.base_url


def run(url: str, workload: Workload, requests_n: int, warmup: int, seed: int = 5) -> tuple[list[dict], dict]:
    rows: list[dict] = []
    out = run_workload(url, workload, requests_n=requests_n, warmup=warmup, seed=seed, time_scale=SPEEDUP,
                       on_row=lambda i, unanalysed, row: rows.append(row))
    return rows, out


def in_flight_profile(rows: list[dict]) -> tuple[float, float, int]:
    """Over the measured window: time-weighted mean in flight, share of time at the peak, the peak."""
    measured = [r for r in rows if r["phase"] == "measured"]
    t0 = min(r["start_s"] for r in measured)
    # the client's own view (wall clock x speed-up): on the sim's model clock e2e_s leaves the client's time out
    e2e = {id(r): r.get("wall_e2e_s") or r["e2e_s"] for r in rows}
    t1 = max(r["start_s"] + e2e[id(r)] for r in measured)
    events = sorted([(r["start_s"], 1) for r in rows] + [(r["start_s"] + e2e[id(r)], -1) for r in rows])
    level, last, area, at_peak, peak = 0, t0, 0.0, {}, 0
    for t, step in events:
        if t > t0:
            span = min(t, t1) - max(last, t0)
            if span > 0:
                area += level * span
                at_peak[level] = at_peak.get(level, 0.0) + span
            last = t
        level += step
        if t0 <= t <= t1:
            peak = max(peak, level)
    peak = max(at_peak)
    return area / (t1 - t0), at_peak[peak] / (t1 - t0), peak


def test_concurrency_16_keeps_16_in_flight_through_the_measured_window(sim):
    rows, out = run(sim, Workload(prompt_tokens=64, output_tokens=48, concurrency=16), requests_n=3, warmup=1)
    phases = [r["phase"] for r in rows]
    assert phases.count("measured") == 16 and phases.count("warmup") == 16
    assert all(r["ok"] for r in rows if r["phase"] != "cooldown")
    mean, share, peak = in_flight_profile(rows)
    # What the closed loop guarantees: all 16 streams in flight together, never more. How much of the
    # window all 16 are in flight depends on how fast this machine re-issues a request (96% at load 7,
    # more quiet): a machine figure (benchmarks/client_fidelity.py reports the wall time between a
    # stream's requests, benchmarks/client_load.py the client under load), not asserted here.
    assert peak == 16, (mean, share, peak)
    # ... and the window is held: on average at least 15 of the 16 in flight (a stream is out only between
    # one request's end and its next send; 96% of the window at all 16 at load 7 means >= 15.4 on average)
    assert mean > 15.0, (mean, share, peak)
    assert out["mode"] == "closed" and out["measured"] == 16


def test_open_loop_sends_on_schedule(sim):
    w = Workload(prompt_tokens=32, output_tokens=16, request_rate=8.0, burstiness=1.0)
    rows, out = run(sim, w, requests_n=40, warmup=2, seed=11)
    assert len(rows) == 42 and all(r["ok"] for r in rows)
    late_wall = [(r["start_s"] - r["scheduled_s"]) / SPEEDUP for r in rows]
    # never early, and every send's lateness recorded; how late a send is (sub-millisecond quiet) is a
    # machine figure, measured by benchmarks/client_load.py, not asserted here
    assert min(late_wall) >= -1e-6, f"a request was sent {-min(late_wall) * 1e3:.3f} ms early"
    assert all(r["send_lateness_wall_s"] is not None and r["send_lateness_wall_s"] >= 0 for r in rows)
    # the lateness is taken when the request's headers were written, after its row's start (the request
    # handed to aiohttp), never before it: it holds the pool's and the HTTP client's own set-up
    assert all(r["send_lateness_wall_s"] >= (r["start_s"] - r["scheduled_s"]) / SPEEDUP - 1e-6 for r in rows)
    assert out["client"]["send_lateness_wall_s"]["n"] == 42 and len(out["schedule_sha256"]) == 64
    # the schedule as recorded is the seeded one: rerun the plan and compare the hashes
    from framework.core.workload import make_plan

    assert make_plan(w, requests_n=40, warmup=2, seed=11).resolved["schedule_sha256"] == out["schedule_sha256"]


def test_max_concurrency_caps_an_open_loop(sim):
    rows, _ = run(sim, Workload(prompt_tokens=32, output_tokens=32, request_rate=1000.0, max_concurrency=3),
                  requests_n=9, warmup=0)
    _, _, peak = in_flight_profile(rows)
    assert peak <= 3 and all(r["ok"] for r in rows)


def test_chat_and_completions_agree_with_generate_within_1_percent(sim):
    decode = {}
    for endpoint in ("generate", "completions", "chat"):
        rows, out = run(sim, Workload(endpoint=endpoint, prompt="text", prompt_tokens=64, output_tokens=128),
                        requests_n=5, warmup=1, seed=8)
        measured = [r for r in rows if r["phase"] == "measured"]
        assert all(r["ok"] and r["completion_tokens"] == 128 for r in measured), [r["error"] for r in measured]
        assert out["endpoint"] == endpoint
        if endpoint != "generate":
            assert {r["token_count_source"] for r in measured} == {"usage"} and out["model"] == "m"
        decode[endpoint] = float(np.median([r["decode_tok_s"] for r in measured]))  # a scheduling hiccup is not the API
    for endpoint in ("completions", "chat"):
        assert decode[endpoint] == pytest.approx(decode["generate"], rel=0.01), decode


def test_a_dataset_is_sampled_by_the_seed_and_recorded(sim, tmp_path):
    data = tmp_path / "conversations.jsonl"
    data.write_text("\n".join(
        '{"conversations": [{"from": "human", "value": "%s"}, {"from": "gpt", "value": "%s"}]}'
        % (" ".join(["word"] * (10 + i)), " ".join(["ok"] * (4 + i))) for i in range(6)))
    w = Workload(dataset={"path": str(data)}, concurrency=2)
    rows, out = run(sim, w, requests_n=4, warmup=1, seed=3)
    measured = [r for r in rows if r["phase"] == "measured"]
    assert all(r["ok"] for r in measured)
    for r in measured:  # the prompt and the output length are the sampled row's
        i = r["dataset_row"]
        assert r["prompt_tokens"] == 10 + i and r["completion_tokens"] == 4 + i
    assert out["dataset"]["sha256"] and set(out["dataset"]["rows_used"]) >= {r["dataset_row"] for r in measured}
    again, _ = run(sim, w, requests_n=4, warmup=1, seed=3)
    picked = lambda rs: sorted(r["dataset_row"] for r in rs if r["phase"] != "cooldown")  # noqa: E731
    assert picked(again) == picked(rows)


def test_a_prompt_longer_than_the_context_is_a_context_length_error_not_a_cut_stream(sim):
    # the sim's profile has a context of 163,840 tokens; SGLang sends the refusal as a stream event (status 200)
    for endpoint in ("generate", "completions"):
        rows, _ = run(sim, Workload(prompt_tokens=170_000, output_tokens=4, endpoint=endpoint), requests_n=1, warmup=0)
        (row,) = rows
        assert not row["ok"] and row["error_class"] == "context_length", row["error"]
        assert "context length" in row["error"]
