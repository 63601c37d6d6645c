"""How far the sim's timing can be trusted: lateness per metric from its trials rows."""

import pytest

from framework.servers.sim.fidelity import sim_metric_lags, sim_relative_lag


def test_sim_relative_lag_is_the_worst_request():
    rows = [{"kind": "request", "sim_max_lag_s": 0.001, "e2e_s": 2.0, "time_scale": 20.0},   # 1% of 0.1 s
            {"kind": "request", "sim_max_lag_s": 0.0005, "e2e_s": 2.0, "time_scale": 20.0},
            {"kind": "launch"}]
    assert sim_relative_lag(rows) == pytest.approx(0.01)
    assert sim_relative_lag([{"kind": "request", "e2e_s": 1.0}]) is None


def test_sim_metric_lags_count_only_the_chunks_the_metric_depends_on():
    # a 100 ms wall stream (2 s model time at speed-up 20) whose middle chunk was 10 ms late
    row = {"kind": "request", "ok": True, "warmup": False, "time_scale": 20.0, "e2e_s": 2.0,
           "chunk_times_s": [0.002, 0.05, 0.1], "chunk_tokens": [1, 2, 2],
           "sim_max_lag_s": 0.010, "sim_first_lag_s": 0.0002, "sim_last_lag_s": 0.0004}
    assert sim_relative_lag([row]) == pytest.approx(0.1)  # any chunk: 10 ms of 100 ms
    assert sim_metric_lags([row], "decode_tok_s") == pytest.approx([0.0004 / 0.098])  # the span's ends only
    assert sim_metric_lags([row], "ttft_s") == pytest.approx([0.0002 / 0.002])
    assert sim_metric_lags([row], "e2e_s") == pytest.approx([0.0004 / 0.1])
    assert sim_metric_lags([row], "accept_length") == []
    assert sim_metric_lags([{**row, "warmup": True}], "decode_tok_s") == []  # warm-ups are not analysed
    old = {k: v for k, v in row.items() if k not in ("sim_first_lag_s", "sim_last_lag_s")}
    assert sim_metric_lags([old], "decode_tok_s") == pytest.approx([0.010 / 0.098])  # older rows: the worst chunk



def test_late_open_loop_arrivals_mark_verdicts_unreliable_above_the_warning_threshold():
    from framework.servers.sim.fidelity import SIM_LAG_WARN, open_loop_mark

    assert open_loop_mark(None) is None
    assert open_loop_mark({"median_s": 0.001, "max_s": 0.002, "median_relative": SIM_LAG_WARN / 2}) is None
    mark = open_loop_mark({"median_s": 0.4, "max_s": 1.07, "median_relative": 0.2})
    assert mark.startswith("UNRELIABLE") and "400.0 ms" in mark and "20.0%" in mark
