"""Launch metrics from rows: percentiles, throughput over the measured window, goodput."""

import pytest

from framework.core.metrics import check_metric, itls, launch_summary, launch_value, meets_slo


def row(start, ttft, gaps, warmup=False, ok=True, scale=1.0):
    times = [ttft]
    for g in gaps:
        times.append(times[-1] + g)
    e2e = times[-1]
    n = len(times)
    return {"kind": "request", "ok": ok, "warmup": warmup, "start_s": start, "e2e_s": e2e, "time_scale": scale,
            "chunk_times_s": [t / scale for t in times], "chunk_tokens": [1] * n, "completion_tokens": n,
            "ttft_s": ttft, "tpot_s": (times[-1] - ttft) / (n - 1)}


def test_percentiles_and_itl():
    rows = [row(0, 0.1 * (i + 1), [0.01, 0.02]) for i in range(10)] + [row(0, 99, [5], warmup=True)]
    assert launch_value("ttft_s.p50", rows) == pytest.approx(0.55)
    assert launch_value("ttft_s.p99", rows) == pytest.approx(0.991)
    assert launch_value("ttft_s.mean", rows) == pytest.approx(0.55)
    assert launch_value("itl_s.p50", rows) == pytest.approx(0.015)
    assert itls(row(0, 0.1, [0.01, 0.03], scale=20)) == pytest.approx([0.01, 0.03])


def test_throughput_counts_tokens_in_the_window_from_every_request():
    # two measured requests back to back over [0, 2]; a warm-up overlapping the window adds its tokens inside it
    rows = [row(0.0, 0.5, [0.5]), row(1.0, 0.5, [0.5]), row(-1.0, 1.5, [1.0, 1.0], warmup=True)]
    # window [0, 2]; measured tokens: 4; warm-up tokens at 0.5 and 1.5 (its first at 0.5 - inside), 2.5 outside
    assert launch_value("output_throughput", rows) == pytest.approx(6 / 2.0)
    assert launch_value("request_throughput", rows) == pytest.approx(2 / 2.0)


def test_goodput_and_attainment():
    rows = [row(0, 0.1, [0.01]), row(0, 0.9, [0.01]), row(0, 0.1, [0.2]), row(0, 0.1, [0.01], ok=False)]
    slo = {"ttft_s": 0.5, "tpot_s": 0.05}
    assert [meets_slo(r, slo) for r in rows] == [True, False, False, False]
    assert launch_value("slo_attainment", rows, slo) == pytest.approx(0.25)
    dur = max(r["start_s"] + r["e2e_s"] for r in rows)
    assert launch_value("goodput", rows, slo) == pytest.approx(1 / dur)
    assert not meets_slo(row(0, 0.1, [0.01, 0.3]), {"itl_s": 0.1})


def test_metric_names():
    for ok in ("ttft_s.p99", "itl_s.p90", "output_throughput", "goodput", "decode_tok_s", "e2e_s.mean"):
        assert check_metric(ok) is None
    for bad in ("ttft_s.p95", "itl_s", "throughput", "foo.p50"):
        assert "allowed" in check_metric(bad)
    assert "goodput" not in launch_summary([row(0, 0.1, [0.01])])  # no SLO, no goodput
