"""`plan` for launch metrics: the noise comes from a pilot's launches, or plan says it needs one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cli_helpers import ROOT, framework

from framework.analysis import planning
from framework.core.spec import load_hypothesis
from framework.execution.client import client_health
from framework.records.trials import client_bottlenecks

H = ROOT / "hypotheses" / "eagle3_under_load.yaml"


def pilot_rows(sd_launch: float, launches: int = 4, seed: int = 0) -> list[dict]:
    """Launches of eagle3_under_load whose throughput varies by sd_launch (log) between launches."""
    h = load_hypothesis(H)
    from framework.core.design import conditions

    rng = np.random.default_rng(seed)
    rows = []
    for c in conditions(h):
        base = {"single": 90.0, "c32": 460.0}[c.levels["load"]] * (0.9 if c.levels["decoding"] == "eagle3" else 1)
        for r in range(launches):
            lid = f"c{c.index}-r{r}-a1"
            rows.append({"kind": "launch", "launch_id": lid, "condition": c.index, "levels": c.levels, "ok": True,
                         "replicate": r, "startup_s": 1.0})
            rate = base * math.exp(rng.normal(0, sd_launch))
            for i in range(4):  # back-to-back requests of 64 tokens at `rate` tokens/s
                dur = 64 / rate
                rows.append({"kind": "request", "launch_id": lid, "condition": c.index, "levels": c.levels,
                             "warmup": False, "ok": True, "start_s": i * dur, "e2e_s": dur, "time_scale": 1.0,
                             "chunk_times_s": list(np.linspace(dur / 64, dur, 64)), "chunk_tokens": [1] * 64})
    return rows


def test_launch_metric_noise_is_the_pilots_between_launch_sd():
    h = load_hypothesis(H)
    quiet = planning.plan_from_rows(h, pilot_rows(0.01))
    noisy = planning.plan_from_rows(h, pilot_rows(0.08))
    need = {r.prediction: r.launches_per_condition for r in noisy}
    assert all(r.launches_per_condition for r in quiet)
    assert need["slower_at_concurrency_32"] > {r.prediction: r.launches_per_condition for r in quiet}[
        "slower_at_concurrency_32"]


def test_a_pilot_without_two_launches_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        planning.plan_from_rows(load_hypothesis(H), pilot_rows(0.01, launches=1))


def test_plan_without_a_pilot_says_it_needs_one(workdir):
    out = framework("plan", "hypothesis=eagle3_under_load", cwd=workdir)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "needs a pilot run" in out.stderr and "pilot=RUN_DIR" in out.stderr


def test_client_health_flags_a_late_client():
    row = {"chunk_times_s": [0.01, 0.02, 0.03], "chunk_tokens": [1, 1, 1]}  # 10 ms between chunks
    ok = client_health([0.0002] * 9, [0.00002] * 9, [row])
    assert not ok["bottleneck"] and ok["median_chunk_gap_wall_s"] == pytest.approx(0.01)
    late = client_health([0.003] * 9, [0.00002] * 9, [row])
    assert late["bottleneck"] and "send lateness" in late["reasons"][0]
    lag = client_health([], [0.0005] * 9, [row])  # 0.5 ms of loop lag against a 20 ms span: 2.5%
    assert lag["bottleneck"] and "event-loop lag" in lag["reasons"][0]
    assert not client_health([], [0.0005] * 9, [{**row, "clock": "sim_model"}])["bottleneck"]  # server's clock
    rows = [{"kind": "workload", "launch_id": "a", "client": late}, {"kind": "workload", "launch_id": "b",
                                                                      "client": ok}]
    assert client_bottlenecks(rows) == ["a"]


def test_a_concurrent_launch_costs_its_span_not_its_summed_latencies():
    rows = []
    for c, streams in ((0, 1), (1, 32)):
        rows.append({"kind": "launch", "launch_id": f"l{c}", "condition": c, "ok": True})
        for i in range(64):  # 64 requests of 2 s each, `streams` at a time
            rows.append({"kind": "request", "launch_id": f"l{c}", "condition": c, "start_s": (i // streams) * 2.0,
                         "e2e_s": 2.0})
    spans = planning.workload_spans(rows)
    assert spans[0] == pytest.approx(128.0) and spans[1] == pytest.approx(4.0)
